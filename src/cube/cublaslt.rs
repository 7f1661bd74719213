//! NVIDIA's cuBLASLt for the streamed path's three products on CUDA, through `cudarc` (loaded
//! at run time, as cubecl-cuda loads NVRTC; it builds without a CUDA toolkit).
//!
//! cuBLASLt runs on a stream of its own, in the primary context that CubeCL also uses, so the
//! pointers of CubeCL's buffers are valid there. CubeCL 0.10 does not expose its stream, so
//! [`super::streamed`] queues the row kernel on this stream too (compiled outside CubeCL's
//! server) and waits for CubeCL's queue once before a step and for this stream once after it;
//! where that kernel cannot be loaded, it orders the two streams from the host, two waits per
//! chunk of rows.
//!
//! Determinism: one algorithm per problem (picked from cuBLASLt's heuristic answers for the
//! shape and the operands' alignments by a rule of the problem alone, [`Pick`]: the first
//! answer, or for TF32 dW the first with 256 x 128 tiles; kept for the process), one stream
//! and one workspace per device; cuBLASLt's algorithms
//! reduce split K through the workspace or in place in a fixed order, never with atomics
//! unless asked for. So the same inputs give the same bits, call after call, at the same
//! pointer alignments (CubeCL's allocations are aligned alike; an offset view may not be).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use sys::cublasLtMatmulAlgoConfigAttributes_t as Config;

/// Bytes of cuBLASLt workspace per device: NVIDIA's recommendation for Hopper (32 MiB).
/// Invariant of memory: part of the path's stated bound on what it allocates.
pub(super) const WORKSPACE_BYTES: usize = 32 << 20;

/// The element type of a product's operands or output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Element {
    F32,
    Bf16,
}

impl Element {
    fn cuda(self) -> sys::cudaDataType {
        match self {
            Element::F32 => sys::cudaDataType::CUDA_R_32F,
            Element::Bf16 => sys::cudaDataType::CUDA_R_16BF,
        }
    }

    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Element::F32 => 4,
            Element::Bf16 => 2,
        }
    }
}

/// One product in cuBLASLt's column-major terms: `D [m, n] = op(A) op(B) + beta D`, `op`
/// transposing where asked; leading dimensions of A, B and D as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub trans_a: bool,
    pub trans_b: bool,
    pub lda: i64,
    pub ldb: i64,
    pub ldd: i64,
    /// A's and B's element type.
    pub operands: Element,
    /// D's element type.
    pub output: Element,
    /// TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`) for f32 operands; else f32 FMA.
    /// Half operands always accumulate in f32 (`CUBLAS_COMPUTE_32F`), on tensor cores.
    pub tf32: bool,
}

impl Gemm {
    /// The same product on operands of type `operands` with its output of type `output`
    /// (accumulated in f32 whatever the types).
    pub fn typed(self, operands: Element, output: Element) -> Self {
        Self {
            operands,
            output,
            tf32: self.tf32 && operands == Element::F32,
            ..self
        }
    }

    /// `P [rows, C] = X [rows, I] W^T` with W stored `[C, I]`, all row-major.
    pub fn logits(rows: usize, inputs: usize, classes: usize, tf32: bool) -> Self {
        // Column-major: P^T [C, rows] = (W as [I, C])^T (X as [I, rows]).
        Self::f32(
            classes,
            rows,
            inputs,
            [true, false],
            [inputs, inputs, classes],
            tf32,
        )
    }

    /// `dX [rows, I] = dZ [rows, C] W [C, I]`, row-major.
    pub fn input_gradient(rows: usize, inputs: usize, classes: usize, tf32: bool) -> Self {
        // Column-major: dX^T [I, rows] = (W as [I, C]) (dZ as [C, rows]).
        Self::f32(
            inputs,
            rows,
            classes,
            [false, false],
            [inputs, classes, inputs],
            tf32,
        )
    }

    /// `dW [C, I] (+)= dZ^T X`, dZ `[rows, C]` and X `[rows, I]` row-major.
    pub fn weight_gradient(rows: usize, inputs: usize, classes: usize, tf32: bool) -> Self {
        // Column-major: dW^T [I, C] = (X as [I, rows]) (dZ as [C, rows])^T.
        Self::f32(
            inputs,
            classes,
            rows,
            [false, true],
            [inputs, classes, inputs],
            tf32,
        )
    }

    /// `dW [C, I] (+)= dZ^T X` with the chunk of X given transposed, `Xt [I, rows]` row-major:
    /// the product's K (the rows) is then contiguous in one operand, which TF32's tensor cores
    /// on Hopper read at full rate (with X as stored, both operands are MN-major: half rate).
    pub fn weight_gradient_transposed(
        rows: usize,
        inputs: usize,
        classes: usize,
        tf32: bool,
    ) -> Self {
        // Column-major: dW^T [I, C] = (Xt as [rows, I])^T (dZ as [C, rows])^T.
        Self::f32(
            inputs,
            classes,
            rows,
            [true, true],
            [rows, classes, inputs],
            tf32,
        )
    }

    /// `db [C] (+)= dZ^T 1`, dZ `[rows, C]` row-major, `1` a vector of `rows` ones: the column
    /// sums as a product (coalesced, where a sum per column would stride over C), exact f32.
    pub fn bias_gradient(rows: usize, classes: usize) -> Self {
        // Column-major: db [C, 1] = (dZ as [C, rows]) (ones as [rows, 1]).
        Self::f32(
            classes,
            1,
            rows,
            [false, false],
            [classes, rows, classes],
            false,
        )
    }

    fn f32(
        m: usize,
        n: usize,
        k: usize,
        [trans_a, trans_b]: [bool; 2],
        [lda, ldb, ldd]: [usize; 3],
        tf32: bool,
    ) -> Self {
        Self {
            m: m as u64,
            n: n as u64,
            k: k as u64,
            trans_a,
            trans_b,
            lda: lda as i64,
            ldb: ldb as i64,
            ldd: ldd as i64,
            operands: Element::F32,
            output: Element::F32,
            tf32,
        }
    }
}

/// cuBLASLt on one device: a handle, a stream, a workspace and the algorithm chosen for each
/// problem met so far.
pub(super) struct Engine {
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    /// Keyed by the product, the alignments of A, B and D (see [`Alignments`]) and how its
    /// algorithm is picked from the heuristic's answers ([`Pick`]).
    algorithms: HashMap<(Gemm, Alignments, Pick), sys::cublasLtMatmulAlgo_t>,
    /// The `testing` feature's timeline marks ([`Engine::mark`]) since the last
    /// [`Engine::take_marks`].
    #[cfg(feature = "testing")]
    marks: Vec<(&'static str, cudarc::driver::CudaEvent)>,
}

/// The alignments in bytes (powers of two, at most 256) of a product's A, B and D pointers.
/// An algorithm is chosen for them: the heuristic is told (`MIN_ALIGNMENT_*` preferences), since
/// by default it assumes 256-byte aligned pointers and may answer with an algorithm that reads
/// vectors a less aligned chunk offset would break.
type Alignments = [u32; 3];

/// With the `testing` feature, the heuristic answer that dW's products take
/// ([`crate::testing::with_dw_answer`]); `usize::MAX` for the path's own [`Pick`].
#[cfg(feature = "testing")]
pub(crate) static DW_ANSWER: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(usize::MAX);

/// How a product's algorithm is picked from cuBLASLt's heuristic answers: a rule of the
/// product alone, so the same product gets the same algorithm in every process (on one
/// toolkit and GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Pick {
    /// The first answer.
    First,
    /// The first answer with 256 x 128 tiles among the first [`WIDE_TILE_ANSWERS`], else the
    /// first answer: TF32 dW from the transposed X chunk. Measured on an H100 (2026-12-07,
    /// lease N, `gemm_sweep`): at chunks of 1024 rows (C = 128256) the heuristic answers
    /// 128 x 128 tiles first, 4.12 ms a chunk against 3.47 to 3.52 for three of its four 256 x 128 answers
    /// (the whole TF32 step, two rounds: 86.97 and 88.85 ms against 83.18 and 83.59; lease O,
    /// this rule: 82.96 against 87.72); at 2048 rows (C = 32000) its first answer already
    /// has them.
    WideTile,
    /// Answer k (the last where it gives fewer): [`crate::testing::with_dw_answer`].
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    Answer(usize),
}

/// Heuristic answers asked for under [`Pick::WideTile`]. Tuning: the H100's list for TF32 dW
/// at 1024 rows had its first 256 x 128 answer second.
const WIDE_TILE_ANSWERS: usize = 8;

/// The [`Pick`] of `gemm`: [`Pick::WideTile`] for TF32 dW from the transposed X chunk (both
/// operands transposed), [`Pick::First`] otherwise; with the `testing` feature, dW's products
/// (B transposed: dZ read as `[C, rows]`) under [`crate::testing::with_dw_answer`] take the
/// answer it names.
fn pick_for(gemm: &Gemm) -> Pick {
    #[cfg(feature = "testing")]
    {
        let forced = DW_ANSWER.load(std::sync::atomic::Ordering::Relaxed);
        if gemm.trans_b && forced != usize::MAX {
            return Pick::Answer(forced);
        }
    }
    if gemm.tf32 && gemm.trans_a && gemm.trans_b {
        Pick::WideTile
    } else {
        Pick::First
    }
}

/// The largest power of two, up to 256, that divides `ptr`.
fn alignment(ptr: u64) -> u32 {
    1 << ptr.trailing_zeros().min(8)
}

// SAFETY: the handle is used under the engine's mutex only (cuBLASLt handles may move between
// threads; they must not be used by two at once).
unsafe impl Send for Engine {}

/// The engine of CUDA device `ordinal`, made on first use; `None` where cuBLASLt cannot be
/// loaded or set up (then the CubeCL products run). The answer is kept for the process.
pub(super) fn engine(ordinal: usize) -> Option<&'static Mutex<Engine>> {
    /// Per device ordinal: its engine, or `None` where cuBLASLt did not load.
    type Engines = HashMap<usize, Option<&'static Mutex<Engine>>>;
    static ENGINES: OnceLock<Mutex<Engines>> = OnceLock::new();
    let mut engines = ENGINES
        .get_or_init(Default::default)
        .lock()
        .expect("engine table");
    *engines.entry(ordinal).or_insert_with(|| {
        Engine::new(ordinal)
            .ok()
            .map(|e| &*Box::leak(Box::new(Mutex::new(e))))
    })
}

impl Engine {
    fn new(ordinal: usize) -> Result<Self, String> {
        // SAFETY: only probes the loader path for the library.
        if !unsafe { sys::is_culib_present() } {
            return Err("cuBLASLt is not on the loader path".into());
        }
        let context = CudaContext::new(ordinal).map_err(|e| e.to_string())?;
        let stream = context.new_stream().map_err(|e| e.to_string())?;
        // SAFETY: a device allocation of WORKSPACE_BYTES bytes that cuBLASLt may leave
        // uninitialised: it is scratch space.
        let workspace =
            unsafe { stream.alloc::<u8>(WORKSPACE_BYTES) }.map_err(|e| e.to_string())?;
        let handle = lt::create_handle().map_err(|e| format!("{e:?}"))?;
        Ok(Self {
            context,
            stream,
            handle,
            workspace,
            algorithms: HashMap::new(),
            #[cfg(feature = "testing")]
            marks: Vec::new(),
        })
    }

    /// Enqueues `D = op(A) op(B) + beta D` on the engine's stream.
    ///
    /// # Safety
    /// `a`, `b` and `d` are device pointers of this device, valid for the layouts `gemm`
    /// describes until the stream is synchronised, and nothing else touches them meanwhile.
    pub unsafe fn run(&mut self, gemm: Gemm, a: u64, b: u64, d: u64, beta: f32) {
        self.context
            .bind_to_thread()
            .expect("bind the CUDA context");
        let problem = Problem::new(&gemm).unwrap_or_else(|e| fail(&gemm, e));
        let aligned = [alignment(a), alignment(b), alignment(d)];
        let pick = pick_for(&gemm);
        let algorithm = match self.algorithms.get(&(gemm, aligned, pick)) {
            Some(algorithm) => *algorithm,
            None => {
                let algorithm = unsafe { problem.algorithm(self.handle, aligned, pick) }
                    .unwrap_or_else(|e| fail(&gemm, e));
                self.algorithms.insert((gemm, aligned, pick), algorithm);
                algorithm
            }
        };
        // SAFETY: the caller's contract.
        unsafe { self.enqueue(&gemm, &problem, &algorithm, [a, b, d], beta) };
    }

    /// Enqueues `problem` (the descriptors of `gemm`) on `algorithm`: `D = A B + beta D`.
    ///
    /// # Safety
    /// As [`Engine::run`].
    unsafe fn enqueue(
        &mut self,
        gemm: &Gemm,
        problem: &Problem,
        algorithm: &sys::cublasLtMatmulAlgo_t,
        [a, b, d]: [u64; 3],
        beta: f32,
    ) {
        let alpha = 1.0f32;
        let workspace = {
            use cudarc::driver::DevicePtrMut;
            let (ptr, _record) = self.workspace.device_ptr_mut(&self.stream);
            ptr
        };
        // SAFETY: the caller's contract; the layouts and descriptor live until the call returns.
        unsafe {
            lt::matmul(
                self.handle,
                problem.desc,
                &alpha as *const f32 as *const c_void,
                &beta as *const f32 as *const c_void,
                a as *const c_void,
                problem.a,
                b as *const c_void,
                problem.b,
                d as *const c_void,
                problem.d,
                d as *mut c_void,
                problem.d,
                algorithm,
                workspace as *mut c_void,
                WORKSPACE_BYTES,
                self.stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .unwrap_or_else(|e| fail(gemm, e));
    }

    /// With the `testing` feature, while a timeline is traced
    /// ([`crate::testing::timeline`]), records a timed event on the stream after the work
    /// queued so far, named `label` (the work since the previous mark); nothing otherwise.
    pub fn mark(&mut self, label: &'static str) {
        #[cfg(feature = "testing")]
        if super::streamed::trace::ON.load(std::sync::atomic::Ordering::Relaxed) {
            let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
            let event = self.stream.record_event(timed).expect("a timed CUDA event");
            self.marks.push((label, event));
        }
        #[cfg(not(feature = "testing"))]
        let _ = label;
    }

    /// The marks since the last call (events the stream may not have reached yet); empty
    /// without the `testing` feature or where no timeline was traced.
    #[cfg(feature = "testing")]
    pub fn take_marks(&mut self) -> Vec<(&'static str, cudarc::driver::CudaEvent)> {
        std::mem::take(&mut self.marks)
    }

    /// Blocks until every product enqueued so far has finished.
    pub fn synchronize(&self) {
        self.stream.synchronize().expect("cuBLASLt stream");
    }

    /// The engine's CUDA context (CubeCL's primary context of the device).
    pub fn context(&self) -> &CudaContext {
        &self.context
    }

    /// The engine's stream, for kernels queued beside its products.
    pub fn cu_stream(&self) -> cudarc::driver::sys::CUstream {
        self.stream.cu_stream()
    }

    /// `words` copied to a new device buffer, queued on the engine's stream (so ordered before
    /// what is queued after), with its device address; the buffer must outlive that work.
    pub fn upload(&self, words: &[u64]) -> (CudaSlice<u64>, u64) {
        use cudarc::driver::DevicePtr;
        self.context
            .bind_to_thread()
            .expect("bind the CUDA context");
        let buffer = self.stream.clone_htod(words).expect("upload to the device");
        let ptr = {
            let (ptr, _record) = buffer.device_ptr(&self.stream);
            ptr
        };
        (buffer, ptr)
    }

    /// Enqueues `dst = src^T`: `src` row-major `[rows, cols]` f32, `dst` row-major
    /// `[cols, rows]` f32 (cuBLASLt's matrix transform: a copy, exact).
    ///
    /// # Safety
    /// `src` and `dst` are device pointers of this device holding `rows x cols` floats each,
    /// live until the stream is synchronised, and nothing else touches them meanwhile.
    pub unsafe fn transpose(&mut self, src: u64, dst: u64, rows: usize, cols: usize) {
        self.context
            .bind_to_thread()
            .expect("bind the CUDA context");
        let f32 = sys::cudaDataType::CUDA_R_32F;
        let fail = |e: sys::cublasStatus_t| -> ! {
            panic!(
                "=== burn-fused-head error ===\n  Operation: 'cublaslt'\n  Reason: cuBLASLt \
                 refused the transpose of [{rows}, {cols}]: {e:?}"
            )
        };
        let check = |status: sys::cublasStatus_t| {
            if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                fail(status)
            }
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the descriptors are created, used and destroyed here; the caller's contract
        // for the pointers. Column-major: src is [cols, rows] (ld cols), dst [rows, cols] (ld
        // rows) = op_T(src); no B (beta 0).
        unsafe {
            let mut desc = std::ptr::null_mut();
            check(sys::cublasLtMatrixTransformDescCreate(&mut desc, f32));
            let op: i32 = 1; // CUBLAS_OP_T
            check(sys::cublasLtMatrixTransformDescSetAttribute(
                desc,
                sys::cublasLtMatrixTransformDescAttributes_t::CUBLASLT_MATRIX_TRANSFORM_DESC_TRANSA,
                &op as *const i32 as *const c_void,
                size_of::<i32>(),
            ));
            let a = lt::create_matrix_layout(f32, cols as u64, rows as u64, cols as i64)
                .unwrap_or_else(|e| fail(e.0));
            let c = lt::create_matrix_layout(f32, rows as u64, cols as u64, rows as i64)
                .unwrap_or_else(|e| fail(e.0));
            check(sys::cublasLtMatrixTransform(
                self.handle,
                desc,
                &alpha as *const f32 as *const c_void,
                src as *const c_void,
                a,
                &beta as *const f32 as *const c_void,
                std::ptr::null(),
                std::ptr::null_mut(),
                dst as *mut c_void,
                c,
                self.stream.cu_stream() as sys::cudaStream_t,
            ));
            let _ = lt::destroy_matrix_layout(a);
            let _ = lt::destroy_matrix_layout(c);
            let _ = sys::cublasLtMatrixTransformDescDestroy(desc);
        }
    }
}

/// A product that cuBLASLt refused: a bug of this crate's layouts, never a user error.
fn fail(gemm: &Gemm, error: lt::CublasError) -> ! {
    panic!(
        "=== burn-fused-head error ===\n  Operation: 'cublaslt'\n  Reason: cuBLASLt refused the \
         product {gemm:?}: {error:?}"
    )
}

/// The descriptors of one product, destroyed on drop.
struct Problem {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
}

impl Problem {
    fn new(g: &Gemm) -> Result<Self, lt::CublasError> {
        let compute = if g.tf32 {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let desc = lt::create_matmul_desc(compute, sys::cudaDataType::CUDA_R_32F)?;
        let (a_rows, a_cols) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
        let (b_rows, b_cols) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
        let problem = Self {
            desc,
            a: lt::create_matrix_layout(g.operands.cuda(), a_rows, a_cols, g.lda)?,
            b: lt::create_matrix_layout(g.operands.cuda(), b_rows, b_cols, g.ldb)?,
            d: lt::create_matrix_layout(g.output.cuda(), g.m, g.n, g.ldd)?,
        };
        for (attribute, transpose) in [
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                g.trans_a,
            ),
            (
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                g.trans_b,
            ),
        ] {
            // cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 (cudarc's cuBLASLt bindings do
            // not carry the enum).
            let op: i32 = transpose.into();
            // SAFETY: the descriptor is live; the attribute takes a 32-bit cublasOperation_t.
            unsafe {
                lt::set_matmul_desc_attribute(
                    problem.desc,
                    attribute,
                    &op as *const _ as *const c_void,
                    size_of::<i32>(),
                )?;
            }
        }
        Ok(problem)
    }

    /// The algorithm that `pick` takes from cuBLASLt's heuristic answers for the problem
    /// ([`Problem::answers`]).
    ///
    /// # Safety
    /// `handle` is a live cuBLASLt handle.
    unsafe fn algorithm(
        &self,
        handle: sys::cublasLtHandle_t,
        aligned: Alignments,
        pick: Pick,
    ) -> Result<sys::cublasLtMatmulAlgo_t, lt::CublasError> {
        let asked = match pick {
            Pick::First => 1,
            Pick::WideTile => WIDE_TILE_ANSWERS,
            // At most 64: a testing hook's index, never a count to trust.
            Pick::Answer(k) => k.min(63) + 1,
        };
        // SAFETY: the caller's contract.
        let answers = unsafe { self.answers(handle, aligned, asked) }?;
        let Some(first) = answers.first() else {
            return Err(lt::CublasError(
                sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED,
            ));
        };
        let answer = match pick {
            Pick::First => first,
            Pick::Answer(k) => &answers[k.min(answers.len() - 1)],
            Pick::WideTile => answers
                .iter()
                .find(|r| {
                    config_of(&r.algo, Config::CUBLASLT_ALGO_CONFIG_TILE_ID) == Some(WIDE_TILE)
                })
                .unwrap_or(first),
        };
        Ok(answer.algo)
    }

    /// cuBLASLt's heuristic answers for the problem, up to `asked`, in its order, those whose
    /// state is success (an answer's fields are valid only there): with [`WORKSPACE_BYTES`]
    /// of workspace and pointers of these alignments (A, B, and D, which is also C).
    ///
    /// # Safety
    /// `handle` is a live cuBLASLt handle.
    unsafe fn answers(
        &self,
        handle: sys::cublasLtHandle_t,
        [a, b, d]: Alignments,
        asked: usize,
    ) -> Result<Vec<sys::cublasLtMatmulHeuristicResult_t>, lt::CublasError> {
        use sys::cublasLtMatmulPreferenceAttributes_t as Pref;
        let preference = lt::create_matmul_pref()?;
        let bytes = WORKSPACE_BYTES;
        let set_u32 = |attribute, value: u32| {
            // SAFETY: the preference is live; the alignment attributes take a uint32_t.
            unsafe {
                lt::set_matmul_pref_attribute(
                    preference,
                    attribute,
                    &value as *const u32 as *const c_void,
                    size_of::<u32>(),
                )
            }
        };
        // SAFETY: a plain C struct; all zeros is a valid (empty) value.
        let empty = unsafe { std::mem::zeroed::<sys::cublasLtMatmulHeuristicResult_t>() };
        let mut results = vec![empty; asked];
        let mut returned = 0i32;
        // SAFETY: the preference, layouts and descriptor are live until the end of the block;
        // `results` holds the `asked` answers the heuristic may write.
        let status = unsafe {
            lt::set_matmul_pref_attribute(
                preference,
                Pref::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &bytes as *const usize as *const c_void,
                size_of::<usize>(),
            )
            .and_then(|()| set_u32(Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a))
            .and_then(|()| set_u32(Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b))
            .and_then(|()| set_u32(Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d))
            .and_then(|()| set_u32(Pref::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d))
            .and_then(|()| {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    handle,
                    self.desc,
                    self.a,
                    self.b,
                    self.d,
                    self.d,
                    preference,
                    asked as i32,
                    results.as_mut_ptr(),
                    &mut returned,
                )
                .result()
            })
        };
        // SAFETY: created above, used no more.
        unsafe { lt::destroy_matmul_pref(preference)? };
        status?;
        results.truncate((returned.max(0) as usize).min(asked));
        results.retain(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS);
        Ok(results)
    }
}

/// The tile of [`Pick::WideTile`]: `CUBLASLT_MATMUL_TILE_256x128`.
const WIDE_TILE: u32 = sys::cublasLtMatmulTile_t::CUBLASLT_MATMUL_TILE_256x128 as u32;

/// One attribute (a `uint32_t` one) of a heuristic answer's configuration, where cuBLASLt
/// reports it.
fn config_of(algo: &sys::cublasLtMatmulAlgo_t, attribute: Config) -> Option<u32> {
    let (mut value, mut written) = (0u32, 0usize);
    // SAFETY: the algorithm is a heuristic answer; the attribute is a uint32_t.
    let status = unsafe {
        sys::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attribute,
            &mut value as *mut u32 as *mut c_void,
            size_of::<u32>(),
            &mut written,
        )
    };
    (status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS && written == size_of::<u32>())
        .then_some(value)
}

impl Drop for Problem {
    fn drop(&mut self) {
        // SAFETY: each was created by `Problem::new` and is destroyed once.
        unsafe {
            let _ = lt::destroy_matrix_layout(self.a);
            let _ = lt::destroy_matrix_layout(self.b);
            let _ = lt::destroy_matrix_layout(self.d);
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

/// The `testing` feature's survey of cuBLASLt's algorithms ([`crate::testing::gemm_sweep`]):
/// every heuristic answer for the streamed path's products at one chunk, timed on the engine's
/// stream.
#[cfg(feature = "testing")]
pub(crate) mod sweep {
    use super::*;
    use cudarc::driver::DevicePtr;

    /// A device buffer of `elements` values of `element`, filled with uniform values in
    /// [-scale, scale] (a fixed sequence), or zeros where `scale` is 0.
    fn buffer(engine: &Engine, element: Element, elements: usize, scale: f32) -> CudaSlice<u8> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ elements as u64;
        let mut bytes = Vec::with_capacity(elements * element.bytes() as usize);
        for _ in 0..elements {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale;
            match element {
                Element::F32 => bytes.extend_from_slice(&x.to_le_bytes()),
                Element::Bf16 => bytes.extend_from_slice(&x.to_bits().to_le_bytes()[2..]),
            }
        }
        engine.stream.clone_htod(&bytes).expect("upload")
    }

    /// Every heuristic answer (up to `count`) for `gemm` on A, B and D ([`Problem::answers`]
    /// for 256-byte aligned pointers, as these buffers are), each timed over
    /// `reps` runs with `beta` after two warm-up runs; one line each: its place in the
    /// heuristic's order, its configuration (algorithm id, tile, split K, reduction scheme,
    /// swizzle, stages), its workspace, the heuristic's waves, the median time (ms), and the
    /// largest difference of its output (beta 0) from the first answer's where D is f32.
    fn answers(
        engine: &mut Engine,
        name: &str,
        gemm: Gemm,
        [a, b, d]: [&mut CudaSlice<u8>; 3],
        beta: f32,
        count: usize,
        reps: usize,
    ) -> Vec<String> {
        engine.context.bind_to_thread().expect("bind");
        let problem = Problem::new(&gemm).unwrap_or_else(|e| fail(&gemm, e));
        // SAFETY: the engine's handle is live.
        let results = unsafe { problem.answers(engine.handle, [256; 3], count) }
            .unwrap_or_else(|e| fail(&gemm, e));
        let stream = engine.stream.clone();
        let (a, _ra) = a.device_ptr(&stream);
        let (b, _rb) = b.device_ptr(&stream);
        let (d_ptr, _rd) = d.device_ptr(&stream);
        let mut first: Option<Vec<u8>> = None;
        let mut lines = Vec::new();
        for (index, result) in results.iter().enumerate() {
            let config = [
                Config::CUBLASLT_ALGO_CONFIG_ID,
                Config::CUBLASLT_ALGO_CONFIG_TILE_ID,
                Config::CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                Config::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                Config::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                Config::CUBLASLT_ALGO_CONFIG_STAGES_ID,
            ]
            .map(|attribute| config_of(&result.algo, attribute).unwrap_or(0));
            let run = |engine: &mut Engine, beta: f32| {
                // SAFETY: the buffers are live and sized for the layouts by the caller.
                unsafe { engine.enqueue(&gemm, &problem, &result.algo, [a, b, d_ptr], beta) };
            };
            run(engine, 0.0);
            let max_diff = if gemm.output == Element::F32 {
                let got = engine.stream.clone_dtoh(&*d).expect("read D");
                let floats = |v: &[u8]| -> Vec<f32> {
                    v.chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect()
                };
                match &first {
                    None => {
                        first = Some(got);
                        0.0
                    }
                    Some(first) => floats(first)
                        .iter()
                        .zip(floats(&got))
                        .map(|(x, y)| (x - y).abs())
                        .fold(0.0f32, f32::max),
                }
            } else {
                f32::NAN
            };
            run(engine, beta);
            run(engine, beta);
            let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
            let mut times = Vec::new();
            for _ in 0..reps {
                let start = engine.stream.record_event(timed).expect("event");
                run(engine, beta);
                let end = engine.stream.record_event(timed).expect("event");
                end.synchronize().expect("event");
                times.push(start.elapsed_ms(&end).expect("elapsed"));
            }
            times.sort_by(f32::total_cmp);
            lines.push(format!(
                "{name} answer {index}: config {config:?} workspace {} waves {:.2} ms {:.4} \
                 max_diff {max_diff:e}",
                result.workspaceSize,
                result.wavesCount,
                times[times.len() / 2],
            ));
        }
        lines
    }

    /// The survey at one chunk of `rows` rows, I = `inputs`, C = `classes`: TF32's and
    /// bf16's logits, dX and dW (dW added to, beta 1; TF32's from the transposed X chunk and
    /// from X as stored), up to `count` answers each, `reps` timed runs per answer.
    pub fn survey(
        rows: usize,
        inputs: usize,
        classes: usize,
        count: usize,
        reps: usize,
    ) -> Vec<String> {
        let engine = engine(0).expect("cuBLASLt");
        let mut engine = engine.lock().expect("engine");
        let engine = &mut *engine;
        let mut lines = vec![format!("survey rows {rows} I {inputs} C {classes}")];
        for element in [Element::F32, Element::Bf16] {
            let tf32 = element == Element::F32;
            let tag = if tf32 { "tf32" } else { "bf16" };
            let mut w = buffer(engine, element, classes * inputs, 0.05);
            let mut x = buffer(engine, element, rows * inputs, 1.0);
            let mut xt = buffer(engine, element, rows * inputs, 1.0);
            let mut dz = buffer(engine, element, rows * classes, 1e-3);
            let mut p = buffer(engine, Element::F32, rows * classes, 0.0);
            let mut dx = buffer(engine, element, rows * inputs, 0.0);
            let mut dw = buffer(engine, Element::F32, classes * inputs, 0.0);
            let logits = Gemm::logits(rows, inputs, classes, tf32).typed(element, Element::F32);
            lines.extend(answers(
                engine,
                &format!("{tag} logits"),
                logits,
                [&mut w, &mut x, &mut p],
                0.0,
                count,
                reps,
            ));
            let input = Gemm::input_gradient(rows, inputs, classes, tf32).typed(element, element);
            lines.extend(answers(
                engine,
                &format!("{tag} dX"),
                input,
                [&mut w, &mut dz, &mut dx],
                0.0,
                count,
                reps,
            ));
            let stored =
                Gemm::weight_gradient(rows, inputs, classes, tf32).typed(element, Element::F32);
            lines.extend(answers(
                engine,
                &format!("{tag} dW from X"),
                stored,
                [&mut x, &mut dz, &mut dw],
                1.0,
                count,
                reps,
            ));
            if tf32 {
                let transposed = Gemm::weight_gradient_transposed(rows, inputs, classes, tf32);
                lines.extend(answers(
                    engine,
                    &format!("{tag} dW from Xt"),
                    transposed,
                    [&mut xt, &mut dz, &mut dw],
                    1.0,
                    count,
                    reps,
                ));
            }
        }
        lines
    }
}
