//! The streamed path's chunks on NVIDIA's cuBLASLt, for `R` = CUDA where it loads: the
//! products and the row kernel on cuBLASLt's stream (one GPU timeline), or, where the row
//! kernel cannot be loaded there, the row kernel on CubeCL's stream, ordered from the host.

use std::any::Any;
use std::time::Instant;

use burn::tensor::{DType, TensorMetadata, bf16};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeRuntime, FloatElement, IntElement};
use cubecl::CubeCount;
use cubecl::cuda::CudaRuntime;
use cubecl::server::CubeCountSelection;
use cudarc::driver::CudaSlice;

use super::super::cublaslt::{self, Element, Engine, Gemm};
use super::super::launch::{by_label_type, empty_of};
use super::on_stream;
use super::{Chunk, Grads};

/// Whether `x` is a CUDA tensor whose device loads cuBLASLt.
pub(super) fn available<R: CubeRuntime>(x: &CubeTensor<R>) -> bool {
    (x as &dyn Any)
        .downcast_ref::<CubeTensor<CudaRuntime>>()
        .is_some_and(|x| cublaslt::engine(x.device.index).is_some())
}

/// The product element of `dtype`.
fn element(dtype: DType) -> Element {
    match dtype {
        DType::BF16 => Element::Bf16,
        _ => Element::F32,
    }
}

/// Elements of X's chunk `[rows, I]` at most for its transposed copy (TF32 dW, see
/// [`Gemm::weight_gradient_transposed`]). Invariant of memory: 8 Mi floats, 32 MiB; larger
/// chunks take dW at half rate instead. (8192, 4096, 32000) has 6 Mi, 128256 has 3 Mi,
/// (8192, 1024, 1000) 8 Mi.
const TRANSPOSED_X_ELEMENTS: usize = 8 << 20;

/// Every chunk on cuBLASLt; false (nothing done) where `R` is not CUDA or cuBLASLt does not
/// load on the device.
///
/// One GPU timeline where the row kernel loads on cuBLASLt's stream ([`on_stream`]): one
/// host wait for CubeCL's queue (the inputs, the buffers' fills), every chunk's products and
/// row kernel queued in order on that one stream, one wait for it at the end. Elsewhere the
/// order between cuBLASLt's stream and CubeCL's is kept from the host: per chunk, wait for
/// CubeCL (the inputs, the row kernel), enqueue the products of the previous chunk (dX, db as
/// `dZ^T 1`, dW) and the logits of this one, and wait for them. One chunk buffer serves every
/// chunk: on cuBLASLt's one stream, the previous chunk's dX and dW products read it before the
/// next logits overwrite it. In bf16's whole-batch mode ([`super::whole_batch_dz`]) a chunk's
/// products are db alone, and dX and dW follow the last chunk ([`Products::finish`]) on
/// either route; with rounded logits there, there is no chunk buffer: each chunk's P is
/// written at its rows of the whole batch's dZ, and dZ over it.
pub(super) fn run<R: CubeRuntime>(chunk: &Chunk<'_, R>, rows: usize, grads: &mut Grads<R>) -> bool {
    let Some(x) = (chunk.x as &dyn Any).downcast_ref::<CubeTensor<CudaRuntime>>() else {
        return false;
    };
    let Some(engine) = cublaslt::engine(x.device.index) else {
        return false;
    };
    let entered = Instant::now();
    let mut engine = engine.lock().expect("cuBLASLt engine");
    let inputs = chunk.x.shape()[1];
    let classes = chunk.weight.shape()[0];
    let tf32 = chunk.tf32;
    // X's, W's and dX's type (dZ's too, as an operand); P, dW and db are f32 (P is of the
    // inputs' type with rounded logits).
    let operand = element(chunk.x.dtype);
    let size = operand.bytes();
    let p_type = if chunk.rounded {
        chunk.x.dtype
    } else {
        DType::F32
    };
    // [rows, C], every chunk's P; none with rounded logits in the whole-batch mode, whose P
    // is written at the chunk's rows of the [B, C] dZ buffer.
    let buffer =
        (!(chunk.rounded && chunk.whole)).then(|| empty_of::<R>(chunk.x, [rows, classes], p_type));
    // TF32 dW from a transposed copy of X's chunk [I, rows], where it fits.
    let transposed = (tf32
        && grads.weight.is_some()
        && rows * inputs <= TRANSPOSED_X_ELEMENTS
        && !dw_as_stored())
    .then(|| empty_of::<R>(chunk.x, [inputs, rows], DType::F32));
    // db as the product dZ^T 1: a vector of `rows` ones, of P's type (the product's
    // operands share one).
    let ones = grads.bias.as_ref().map(|db| {
        burn_cubecl::ops::numeric::ones_client(
            db.client.clone(),
            db.device.clone(),
            [rows].into(),
            p_type,
        )
    });
    let stream_kernel = if host_ordered() {
        None
    } else {
        row_kernel(chunk, x, &engine)
    };
    // Every address the products and the row kernel take, in one call to CubeCL's server
    // thread, which on one timeline also flushes CubeCL's queue (the inputs, the fills) for
    // this thread to wait on: one round trip where there were one per buffer and one for the
    // wait.
    let [
        x_ptr,
        w_ptr,
        p_ptr,
        dz_half,
        dx,
        dw,
        db,
        ones_ptr,
        xt,
        bias,
        labels,
        loss_rows,
        predictions,
        row_weights,
        z_weights,
        lse,
        entropy,
    ] = addresses(
        [
            Some(chunk.x),
            Some(chunk.weight),
            Some(buffer.as_ref().unwrap_or(chunk.dz_half)),
            Some(chunk.dz_half),
            grads.x.as_ref(),
            grads.weight.as_ref(),
            grads.bias.as_ref(),
            ones.as_ref(),
            transposed.as_ref(),
            Some(chunk.bias),
            Some(chunk.labels),
            Some(chunk.loss_rows),
            Some(chunk.predictions),
            Some(chunk.row_weights),
            Some(chunk.z_weights),
            Some(chunk.lse),
            Some(chunk.entropy),
        ],
        stream_kernel.is_some(),
    );
    let waited = Instant::now();
    let given = |ptr: Option<u64>| ptr.expect("the address of a given tensor");
    let p_ptr = given(p_ptr);
    let products = Products {
        x: given(x_ptr),
        w: given(w_ptr),
        p: p_ptr,
        p_output: element(p_type),
        p_at_rows: buffer.is_none(),
        // dZ as the dX and dW products' operand: P itself, or its copy in the inputs' type.
        dz: if chunk.half { given(dz_half) } else { p_ptr },
        dx,
        dw,
        db,
        ones: ones_ptr,
        xt,
        inputs,
        classes,
        whole: chunk.whole,
        // dW's type: the inputs' in the lean mode, else f32 (the whole-batch mode's one
        // product writes the inputs' type in `finish`).
        dw_output: if chunk.lean { operand } else { Element::F32 },
        batch: chunk.batch,
        tf32,
        operand,
        size,
    };
    match stream_kernel {
        Some(kernel) => {
            let fixed = [
                bias,
                labels,
                loss_rows,
                predictions,
                dz_half,
                row_weights,
                z_weights,
                lse,
                entropy,
            ]
            .map(given);
            let stamps = [entered, waited];
            one_timeline(
                chunk,
                rows,
                buffer.as_ref(),
                &products,
                fixed,
                &mut engine,
                kernel,
                stamps,
            );
            #[cfg(feature = "testing")]
            super::routes::SWITCHES
                .one_timeline
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        None => host_ordered_chunks(chunk, rows, buffer.as_ref(), &products, &mut engine),
    }
    // Marks of a route not traced (host-ordered: its stream waits for the host) are dropped.
    #[cfg(feature = "testing")]
    engine.take_marks();
    #[cfg(feature = "testing")]
    if chunk.whole {
        super::routes::SWITCHES
            .whole_batch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    true
}

/// The device addresses and sizes of the products of every chunk.
struct Products {
    x: u64,
    w: u64,
    /// The chunk buffer, or with rounded logits in the whole-batch mode (`p_at_rows`), dZ's
    /// `[B, C]` buffer, at whose chunk rows P is written.
    p: u64,
    /// P's type: f32, or the inputs' with rounded logits (then also db's operands).
    p_output: Element,
    /// P at the chunk's rows of `p` ([`Products::p_at`]), not at its start.
    p_at_rows: bool,
    dz: u64,
    dx: Option<u64>,
    dw: Option<u64>,
    db: Option<u64>,
    ones: Option<u64>,
    /// With TF32 dW, X's chunk transposed `[I, rows]`.
    xt: Option<u64>,
    inputs: usize,
    classes: usize,
    /// The whole-batch dZ mode: `dz` is `[B, C]`, dX and dW run once in [`Products::finish`].
    whole: bool,
    /// The type of dW, which each chunk's product reads and writes (the lean mode: the
    /// inputs').
    dw_output: Element,
    batch: usize,
    tf32: bool,
    operand: Element,
    size: u64,
}

impl Products {
    /// In the whole-batch mode, enqueues dX = dZ W and dW = dZ^T X over the whole batch, each
    /// one product written in the inputs' type (f32 accumulation inside it); nothing
    /// otherwise.
    ///
    /// # Safety
    /// As [`Products::logits`], and every chunk's dZ is written.
    unsafe fn finish(&self, engine: &mut Engine) {
        if !self.whole {
            return;
        }
        let (batch, inputs, classes) = (self.batch, self.inputs, self.classes);
        let operand = self.operand;
        // SAFETY: the caller's contract.
        unsafe {
            if let Some(dx) = self.dx {
                let gemm =
                    Gemm::input_gradient(batch, inputs, classes, false).typed(operand, operand);
                engine.run(gemm, self.w, self.dz, dx, 0.0);
                engine.mark("dX");
            }
            if let Some(dw) = self.dw {
                let gemm =
                    Gemm::weight_gradient(batch, inputs, classes, false).typed(operand, operand);
                engine.run(gemm, self.x, self.dz, dw, 0.0);
                engine.mark("dW");
            }
        }
    }

    /// The address of the row kernel's `dz_half` for rows `first..`: its base, or in the
    /// whole-batch mode, row `first` of dZ's `[B, C]` copy.
    fn dz_half_at(&self, dz_half: u64, first: usize) -> u64 {
        if self.whole {
            dz_half + (first * self.classes) as u64 * self.size
        } else {
            dz_half
        }
    }

    /// The address of rows `first..`'s P: `p`, or its row `first` where P is written at the
    /// chunk's rows.
    fn p_at(&self, first: usize) -> u64 {
        if self.p_at_rows {
            self.p + (first * self.classes) as u64 * self.p_output.bytes()
        } else {
            self.p
        }
    }

    /// Enqueues `P = X[first..first + n] W^T`.
    ///
    /// # Safety
    /// Every pointer is of a live buffer of the engine's device, its layout as the product
    /// describes, until the engine's stream has run it; X and W are written.
    unsafe fn logits(&self, engine: &mut Engine, first: usize, n: usize) {
        let gemm = Gemm::logits(n, self.inputs, self.classes, self.tf32)
            .typed(self.operand, self.p_output);
        let x_rows = self.x + (first * self.inputs) as u64 * self.size;
        // SAFETY: the caller's contract.
        unsafe { engine.run(gemm, self.w, x_rows, self.p_at(first), 0.0) };
        engine.mark("logits");
    }

    /// Enqueues the wanted gradients' products of rows `first..first + n`, whose dZ is in the
    /// chunk buffer (or its copy, or with rounded logits in the whole-batch mode, at its rows
    /// of `p`): dX's rows, then db and dW, written by the first chunk, added to after.
    /// In the whole-batch mode, db alone ([`Products::finish`] runs dX and dW).
    ///
    /// # Safety
    /// As [`Products::logits`], and dZ is written.
    unsafe fn gradients(&self, engine: &mut Engine, first: usize, n: usize) {
        let (inputs, classes, tf32) = (self.inputs, self.classes, self.tf32);
        let operand = self.operand;
        let beta = if first == 0 { 0.0 } else { 1.0 };
        // db = dZ^T 1 from P's dZ: f32, or rounded to the inputs' type with rounded logits.
        let bias_gradient = Gemm::bias_gradient(n, classes).typed(self.p_output, Element::F32);
        if self.whole {
            if let (Some(db), Some(ones)) = (self.db, self.ones) {
                // SAFETY: the caller's contract.
                unsafe { engine.run(bias_gradient, self.p_at(first), ones, db, beta) };
                engine.mark("db");
            }
            return;
        }
        // SAFETY: the caller's contract.
        unsafe {
            if let Some(dx) = self.dx {
                let gemm = Gemm::input_gradient(n, inputs, classes, tf32).typed(operand, operand);
                let dx_rows = dx + (first * inputs) as u64 * self.size;
                engine.run(gemm, self.w, self.dz, dx_rows, 0.0);
                engine.mark("dX");
            }
            if let (Some(db), Some(ones)) = (self.db, self.ones) {
                engine.run(bias_gradient, self.p, ones, db, beta);
                engine.mark("db");
            }
            if let Some(dw) = self.dw {
                let x_rows = self.x + (first * inputs) as u64 * self.size;
                match self.xt {
                    Some(xt) => {
                        engine.transpose(x_rows, xt, n, inputs);
                        engine.mark("transpose");
                        let gemm = Gemm::weight_gradient_transposed(n, inputs, classes, tf32);
                        engine.run(gemm, xt, self.dz, dw, beta);
                    }
                    None => {
                        let gemm = Gemm::weight_gradient(n, inputs, classes, tf32)
                            .typed(operand, self.dw_output);
                        engine.run(gemm, x_rows, self.dz, dw, beta);
                    }
                }
                engine.mark("dW");
            }
        }
    }
}

/// Every chunk on cuBLASLt's stream, the row kernel too: after the caller's one host wait
/// (CubeCL has written the inputs and filled the ones, [`addresses`]), one at exit (the
/// gradients are written for CubeCL's next kernels). `fixed` are the addresses of the row
/// kernel's tensors after P, in its argument order; `stamps` when the step entered and when
/// its entry wait returned (for [`crate::testing::timeline`]).
#[allow(clippy::too_many_arguments)]
fn one_timeline<R: CubeRuntime>(
    chunk: &Chunk<'_, R>,
    rows: usize,
    buffer: Option<&CubeTensor<R>>,
    products: &Products,
    fixed: [u64; 9],
    engine: &mut Engine,
    kernel: &'static on_stream::Loaded,
    stamps: [Instant; 2],
) {
    let cuda = |t: &CubeTensor<R>| -> CubeTensor<CudaRuntime> {
        (t as &dyn Any)
            .downcast_ref::<CubeTensor<CudaRuntime>>()
            .expect("a CUDA tensor")
            .clone()
    };
    let tensors = [
        chunk.bias,
        chunk.labels,
        chunk.loss_rows,
        chunk.predictions,
        chunk.dz_half,
        chunk.row_weights,
        chunk.z_weights,
        chunk.lse,
        chunk.entropy,
    ];
    let fixed: [_; 9] = std::array::from_fn(|k| (cuda(tensors[k]), fixed[k]));
    let terms = chunk.terms;
    let client = cuda(chunk.x).client;
    // The dynamic metadata (P's shape, the others' fixed) of a chunk of n rows, on the device.
    let mut uploaded: Vec<(usize, CudaSlice<u64>, u64)> = Vec::new();
    engine.mark("start");
    let mut first = 0;
    while first < chunk.batch {
        let n = rows.min(chunk.batch - first);
        // SAFETY: every pointer is of a live buffer of this device, laid out as the products
        // and the row kernel's tensors say; CubeCL wrote them before the caller's wait and
        // touches none of them until the engine's stream is synchronised below.
        unsafe { products.logits(engine, first, n) };
        let view = p_rows(chunk, buffer, first, n);
        let p = cuda(&view);
        let [b, l, loss, pred, dzh, rw, zw, lse, ent] = &fixed;
        // The rows the kernel writes (its metadata theirs), at the address `dz_half_at` gives.
        let dz_rows = cuda(&chunk.dz_half_rows(first, n));
        let arguments = on_stream::Arguments {
            tensors: [
                (&p, products.p_at(first)),
                (&b.0, b.1),
                (&l.0, l.1),
                (&loss.0, loss.1),
                (&pred.0, pred.1),
                (&dz_rows, products.dz_half_at(dzh.1, first)),
                (&rw.0, rw.1),
                (&zw.0, zw.1),
                (&lse.0, lse.1),
                (&ent.0, ent.1),
            ],
            first,
            batch: chunk.batch,
            floats: [
                f32::NAN,
                terms.logit_scale,
                terms.softcap.unwrap_or(1.0),
                terms.z_loss,
            ],
            vector: super::row_vector(products.classes),
        };
        let mut info = on_stream::info(&arguments);
        let dynamic = (info.dynamic_offset < info.words.len()).then(|| {
            match uploaded.iter().find(|(rows, _, _)| *rows == n) {
                Some((_, _, ptr)) => *ptr,
                None => {
                    let (buffer, ptr) = engine.upload(&info.words[info.dynamic_offset..]);
                    uploaded.push((n, buffer, ptr));
                    ptr
                }
            }
        });
        let count = match CubeCountSelection::new(&client, n as u32).cube_count() {
            CubeCount::Static(x, y, z) => (x, y, z),
            CubeCount::Dynamic(_) => unreachable!("a static count for a known row count"),
        };
        // SAFETY: as above; the row kernel follows the logits on the same stream and the
        // gradients' products follow it.
        unsafe {
            on_stream::launch(
                kernel,
                engine.cu_stream(),
                count,
                &arguments,
                &mut info,
                dynamic,
            );
            engine.mark("rows");
            products.gradients(engine, first, n);
        }
        super::note_memory(&view);
        first += n;
    }
    // SAFETY: as above; every chunk's dZ is queued before.
    unsafe { products.finish(engine) };
    let queued = Instant::now();
    let work = (chunk.batch * products.inputs * products.classes) as u64;
    if on_server(work) {
        wait_on_server(&client, engine);
    } else {
        engine.synchronize();
    }
    #[cfg(feature = "testing")]
    if super::trace::ON.load(std::sync::atomic::Ordering::Relaxed) {
        let [entered, waited] = stamps;
        let synced = Instant::now();
        let called = super::trace::CALLED.lock().expect("timeline").take();
        let timeline = crate::testing::Timeline {
            called: called.unwrap_or(entered),
            entered,
            waited,
            queued,
            synced,
            returned: synced,
            gpu: Vec::new(),
        };
        let marks = engine.take_marks();
        super::trace::STEPS
            .lock()
            .expect("timeline")
            .push((timeline, marks));
        super::trace::PUSHED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    #[cfg(not(feature = "testing"))]
    let _ = (stamps, queued);
}

/// Every chunk on cuBLASLt, the row kernel on CubeCL's stream, ordered from the host (two
/// waits per chunk).
fn host_ordered_chunks<R: CubeRuntime>(
    chunk: &Chunk<'_, R>,
    rows: usize,
    buffer: Option<&CubeTensor<R>>,
    products: &Products,
    engine: &mut Engine,
) {
    // The previous chunk's (first, n), whose dZ is in the buffer.
    let mut previous: Option<(usize, usize)> = None;
    let mut first = 0;
    while first < chunk.batch || previous.is_some() {
        wait_for_cubecl(chunk.x);
        if let Some((prev, n)) = previous.take() {
            // SAFETY: every pointer is of a live buffer of this device, its layout as the
            // products describe; CubeCL wrote them before the wait above and touches none of
            // them until the engine's stream is synchronised below.
            unsafe { products.gradients(engine, prev, n) };
        }
        if first < chunk.batch {
            let n = rows.min(chunk.batch - first);
            // SAFETY: as above; P's first n rows are written.
            unsafe { products.logits(engine, first, n) };
            engine.synchronize();
            let p = p_rows(chunk, buffer, first, n);
            (chunk.launch_rows)(&p, chunk, first);
            super::note_memory(&p);
            previous = Some((first, n));
            first += n;
        } else {
            // SAFETY: as above; every chunk's dZ is written (CubeCL's queue waited for).
            unsafe { products.finish(engine) };
            engine.synchronize();
        }
    }
}

/// The row kernel of `chunk`'s switches and types, loaded for cuBLASLt's stream, or `None`
/// where it cannot run there.
fn row_kernel<R: CubeRuntime>(
    chunk: &Chunk<'_, R>,
    x: &CubeTensor<CudaRuntime>,
    engine: &Engine,
) -> Option<&'static on_stream::Loaded> {
    let switches = on_stream::Switches {
        vector: super::row_vector(chunk.weight.shape()[0]),
        units: super::row_units(
            x.client.properties().hardware.max_units_per_cube,
            chunk.weight.shape()[0],
        ),
        relu: chunk.relu,
        predict: chunk.predict,
        half: chunk.half,
        weighted: chunk.weighted,
        softcap: chunk.terms.softcap.is_some(),
        z_loss: chunk.terms.z_loss != 0.0,
        stats: chunk.stats,
    };
    let load = match (chunk.x.dtype, chunk.rounded) {
        (DType::BF16, true) => {
            by_label_type!("head_step", chunk.labels.dtype, load_rows::<bf16, bf16>)
        }
        (DType::BF16, false) => {
            by_label_type!("head_step", chunk.labels.dtype, load_rows::<bf16, f32>)
        }
        _ => by_label_type!("head_step", chunk.labels.dtype, load_rows::<f32, f32>),
    };
    load(x, switches, engine)
}

/// [`row_kernel`] for inputs of type `E`, P stored as `P` and labels of type `L`.
fn load_rows<E: FloatElement, P: FloatElement, L: IntElement>(
    x: &CubeTensor<CudaRuntime>,
    switches: on_stream::Switches,
    engine: &Engine,
) -> Option<&'static on_stream::Loaded> {
    let task = on_stream::rows_task::<E, P, L>(&x.client, switches);
    on_stream::compile(x.device.index, engine.context(), &task)
}

/// The `testing` feature's switch `$field` of [`super::routes::SWITCHES`]; false without the
/// feature.
macro_rules! forced {
    ($field:ident) => {{
        #[cfg(feature = "testing")]
        {
            super::routes::SWITCHES
                .$field
                .load(std::sync::atomic::Ordering::Relaxed)
        }
        #[cfg(not(feature = "testing"))]
        {
            false
        }
    }};
}

/// Whether TF32 dW from X as stored is forced (the comparison of the two layouts).
fn dw_as_stored() -> bool {
    forced!(dw_as_stored)
}

/// Whether the host-ordered route is forced (the comparison of the two routes).
fn host_ordered() -> bool {
    forced!(host_ordered)
}

/// Rows `first..first + n`'s P as a `[n, C]` tensor on the memory it is written to: the first
/// `n` rows of the chunk buffer, or (no buffer: rounded logits in the whole-batch mode) those
/// rows of the `[B, C]` dZ buffer.
fn p_rows<R: CubeRuntime>(
    chunk: &Chunk<'_, R>,
    buffer: Option<&CubeTensor<R>>,
    first: usize,
    n: usize,
) -> CubeTensor<R> {
    match buffer {
        Some(buffer) => rows_view(buffer, n),
        None => chunk.whole_rows(first, [n, chunk.weight.shape()[0]]),
    }
}

/// The first `n` rows of the chunk buffer as a `[n, C]` tensor on the same memory.
fn rows_view<R: CubeRuntime>(buffer: &CubeTensor<R>, n: usize) -> CubeTensor<R> {
    let classes = buffer.shape()[1];
    CubeTensor::new_contiguous(
        buffer.client.clone(),
        buffer.device.clone(),
        [n, classes].into(),
        buffer.handle.clone(),
        buffer.dtype,
    )
}

/// The device addresses of the given tensors' first elements (CUDA tensors of one device),
/// `None` where no tensor is given, fetched in one call to CubeCL's server thread: the
/// closure runs there, where each `get_resource` runs at once, not as a round trip each.
/// With `wait`, the same call also flushes CubeCL's queue and records the point to wait for
/// (`sync`), and this thread then waits for it, so the server thread stays free for others
/// (the wait at exit may run there: [`wait_on_server`]).
/// Failures are raised here, on the caller's thread (a panic on the server thread would only
/// be logged there).
fn addresses<R: CubeRuntime, const N: usize>(
    tensors: [Option<&CubeTensor<R>>; N],
    wait: bool,
) -> [Option<u64>; N] {
    let tensors = tensors.map(|t| {
        t.map(|t| {
            (t as &dyn Any)
                .downcast_ref::<CubeTensor<CudaRuntime>>()
                .expect("a CUDA tensor")
        })
    });
    let client = &tensors
        .iter()
        .flatten()
        .next()
        .expect("at least one tensor")
        .client;
    let (addresses, synced) = client
        .exclusive(|| {
            let addresses = tensors.map(|t| {
                t.map(|t| {
                    client
                        .get_resource(t.handle.clone())
                        .map(|r| r.resource().ptr)
                })
            });
            (addresses, wait.then(|| client.sync()))
        })
        .expect("CubeCL's server thread");
    if let Some(synced) = synced {
        cubecl::future::block_on(synced).expect("CubeCL sync");
    }
    addresses.map(|a| a.map(|a| a.expect("the device address of a CUDA buffer")))
}

/// The largest step (B I C, the multiply-adds of one of its products) whose wait at exit runs
/// on CubeCL's server thread ([`wait_on_server`]): 2^36, about 0.6 ms of the three products
/// in bf16, 1.2 ms in TF32 and 8 ms in exact f32 on an H100. (8192, 1024, 1000) is under it,
/// where the wait there took bf16's step from 0.54 to 0.39 ms (2026-12-07, H100);
/// (8192, 4096, 32000) is above, where it changed nothing and would keep the server thread
/// from other threads for the whole stream. A choice between those two measured sizes.
const SERVER_WAIT_WORK: u64 = 1 << 36;

/// Whether the wait at exit of a step of `work` (B I C) runs on CubeCL's server thread: the
/// rule above, or [`crate::testing::with_host_waits`]'s choice.
fn on_server(work: u64) -> bool {
    !forced!(exit_on_caller) && (forced!(exit_on_server) || work <= SERVER_WAIT_WORK)
}

/// Blocks until the engine's stream has run, the wait itself on CubeCL's server thread
/// (`exclusive`): that thread goes back to its queue as soon as the stream is done, awake,
/// where after a wait on this thread it would have slept through it (in 150 us steps once
/// idle) and the next call to it (the upstream gradient's read, the caller's sync, the next
/// op) would wait for it to wake. Other threads' calls to CubeCL on this device wait for the
/// stream meanwhile: for small steps only ([`SERVER_WAIT_WORK`]).
fn wait_on_server(client: &cubecl::client::ComputeClient<CudaRuntime>, engine: &Engine) {
    /// The stream's handle, sent to the server thread, which waits on it before this thread
    /// goes on: the engine (and its stream) outlives the wait.
    struct Stream(cudarc::driver::sys::CUstream);
    // SAFETY: a CUDA stream handle may be used from any thread of its context's process; the
    // server thread has CubeCL's context (the engine's) current.
    unsafe impl Send for Stream {}
    let stream = Stream(engine.cu_stream());
    client
        .exclusive(move || {
            let stream = stream;
            // SAFETY: the engine's live stream, in the context current on this thread.
            unsafe { cudarc::driver::result::stream::synchronize(stream.0) }
        })
        .expect("CubeCL's server thread")
        .expect("cuBLASLt stream");
}

/// Blocks until CubeCL's queue on `like`'s device has run.
fn wait_for_cubecl<R: CubeRuntime>(like: &CubeTensor<R>) {
    cubecl::future::block_on(like.client.sync()).expect("CubeCL sync");
}
