//! The row kernel on cuBLASLt's stream (CUDA), so that a step's chunks run on one GPU
//! timeline: the products and the row kernel of every chunk are queued on one stream, with
//! one host wait for CubeCL's queue when the step starts and one for the stream when it ends.
//!
//! The kernel is the same `#[cube]` code CubeCL launches (`streamed_rows`), compiled by
//! CubeCL's own CUDA compiler outside its server (`KernelTask::compile`), then by NVRTC with
//! the options cubecl-cuda 0.10 gives it (`compute/context.rs`, `compile_kernel`): the same
//! source, the same machine code, the same bits (`tests/streamed.rs` compares the two routes
//! bit for bit on CUDA). It is launched as cubecl-cuda launches it (`execute_task`): the
//! kernel's parameters are the device addresses of its tensors in argument order, then a
//! device buffer holding the dynamic part of the metadata (the tensors' shapes and strides),
//! then the info block (the scalars, then the static metadata) by value, as a grid constant.
//! `cubecl::InfoBuilder` lays the info out as CubeCL's launcher does.
//!
//! Grid constants need compute capability 7.0; below it, or where NVRTC or the module fails,
//! [`compile`] answers `None` and the caller orders the two streams from the host.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Mutex, OnceLock};

use burn_cubecl::tensor::CubeTensor;
use burn_fused_head_kernels::large_classes::streamed as kernels;
use cubecl::cuda::{CudaCompiler, CudaRuntime};
use cubecl::prelude::*;
use cubecl::{Compiler, CubeTask, InfoBuilder};
use cudarc::driver::{CudaContext, sys};

/// The row kernel's compile-time switches (see `streamed_rows`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Switches {
    /// The vector width of P, the bias and `dz_half` (`super::row_vector`).
    pub vector: usize,
    /// Units per cube (`super::row_units`).
    pub units: u32,
    pub relu: bool,
    pub predict: bool,
    pub half: bool,
    pub weighted: bool,
    pub softcap: bool,
    pub z_loss: bool,
    pub stats: bool,
}

/// The row kernel for inputs of type `E`, P stored as `P` (f32, or `E` where the logits are
/// rounded) and labels of type `L`, as CubeCL's `launch_unchecked` would build it on
/// `client`'s device.
pub(super) fn rows_task<E: Float, P: Float, L: Int>(
    client: &ComputeClient<CudaRuntime>,
    s: Switches,
) -> KernelTask<CudaCompiler, kernels::streamed_rows::StreamedRows<f32, E, P, L, CudaRuntime>> {
    let settings = KernelSettings::default()
        .cube_dim(CubeDim::new_1d(s.units))
        .address_type(AddressType::U32);
    let t = || TensorCompilationArg { inplace: None };
    let kernel = kernels::streamed_rows::StreamedRows::<f32, E, P, L, CudaRuntime>::new(
        settings,
        client.clone(),
        t(),
        t(),
        t(),
        t(),
        t(),
        t(),
        t(),
        t(),
        t(),
        t(),
        (),
        (),
        (),
        (),
        (),
        (),
        s.vector,
        s.units as usize,
        s.relu,
        s.predict,
        s.half,
        s.weighted,
        s.softcap,
        s.z_loss,
        s.stats,
    );
    KernelTask::new(kernel)
}

/// A kernel compiled and loaded for one device, kept for the process.
#[derive(Debug)]
pub(super) struct Loaded {
    func: sys::CUfunction,
    block: (u32, u32, u32),
    shared_bytes: u32,
}

// SAFETY: a loaded function is a handle into a module that is never unloaded; CUDA functions
// may be launched from any thread of the context.
unsafe impl Send for Loaded {}
unsafe impl Sync for Loaded {}

/// `task` compiled and loaded in `context` (once per device and kernel; the answer, also a
/// failure, is kept for the process), or `None` where this route cannot run it.
pub(super) fn compile<K: CubeTask<CudaCompiler>>(
    ordinal: usize,
    context: &CudaContext,
    task: &K,
) -> Option<&'static Loaded> {
    type Kernels = HashMap<(usize, KernelId), Option<&'static Loaded>>;
    static KERNELS: OnceLock<Mutex<Kernels>> = OnceLock::new();
    let mut kernels = KERNELS
        .get_or_init(Default::default)
        .lock()
        .expect("row kernel table");
    *kernels.entry((ordinal, task.id())).or_insert_with(|| {
        load(context, task)
            .map_err(|reason| {
                eprintln!(
                    "burn-fused-head: the row kernel does not run on cuBLASLt's stream ({reason}); \
                     the streamed path orders its two streams from the host"
                )
            })
            .ok()
            .map(|loaded| &*Box::leak(Box::new(loaded)))
    })
}

fn load<K: CubeTask<CudaCompiler>>(context: &CudaContext, task: &K) -> Result<Loaded, String> {
    context.bind_to_thread().map_err(|e| e.to_string())?;
    let (major, minor) = context.compute_capability().map_err(|e| e.to_string())?;
    let arch = (major * 10 + minor) as u32;
    if arch < 70 {
        return Err(format!(
            "compute capability {major}.{minor} has no grid constants"
        ));
    }
    let warp = context
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_WARP_SIZE)
        .map_err(|e| e.to_string())?;
    // cubecl-cuda 0.10's options for this architecture (`runtime.rs`, `init`); `fast_tanh`
    // left off: it changes `tanh` alone, which the row kernel does not call.
    // Assigned field by field: the type is cubecl-cpp's, named here only through the compiler.
    #[allow(clippy::field_reassign_with_default)]
    let options = {
        let mut options: <CudaCompiler as Compiler>::CompilationOptions = Default::default();
        options.warp_size = warp as u32;
        options.supports_features.fast_math = true;
        options.supports_features.grid_constants = true;
        options.supports_features.clusters = arch >= 90;
        options.supports_features.elect_sync = arch >= 90;
        options
    };
    let compiled = task
        .compile(
            &mut Default::default(),
            &options,
            ExecutionMode::Unchecked,
            task.address_type(),
        )
        .map_err(|e| format!("{e:?}"))?;
    let shared_bytes = compiled
        .repr
        .as_ref()
        .map_or(0, |repr| repr.shared_memory_size()) as u32;
    let gpu = if arch >= 90 {
        format!("--gpu-architecture=sm_{arch}a")
    } else {
        format!("--gpu-architecture=sm_{arch}")
    };
    let include = cubecl::cuda::install::include_path();
    let cccl = cubecl::cuda::install::cccl_include_path();
    let include = format!("--include-path={}", include.display());
    let cccl_include = format!("--include-path={}", cccl.display());
    let mut nvrtc_options = vec![gpu.as_str(), include.as_str(), "-lineinfo"];
    if cccl.exists() {
        nvrtc_options.push(&cccl_include);
    }
    let source = CString::new(compiled.source).map_err(|e| e.to_string())?;
    // SAFETY: NVRTC's program is created from a NUL-terminated source that outlives it; the
    // PTX it returns is NUL-terminated and outlives the module load; the function's name is
    // the compiled kernel's entry point.
    unsafe {
        use cudarc::nvrtc::result as nvrtc;
        let program =
            nvrtc::create_program(source.as_c_str(), None).map_err(|e| format!("{e:?}"))?;
        if nvrtc::compile_program(program, &nvrtc_options).is_err() {
            let log = nvrtc::get_program_log(program).map_err(|e| format!("{e:?}"))?;
            let log = std::ffi::CStr::from_ptr(log.as_ptr())
                .to_string_lossy()
                .into_owned();
            let _ = nvrtc::destroy_program(program);
            return Err(format!("NVRTC: {log}"));
        }
        let ptx = nvrtc::get_ptx(program).map_err(|e| format!("{e:?}"))?;
        let _ = nvrtc::destroy_program(program);
        let module = cudarc::driver::result::module::load_data(ptx.as_ptr() as *const c_void)
            .map_err(|e| format!("loading the PTX: {e:?}"))?;
        let name = CString::new(compiled.entrypoint_name).map_err(|e| e.to_string())?;
        let func = cudarc::driver::result::module::get_function(module, name)
            .map_err(|e| format!("{e:?}"))?;
        cudarc::driver::result::function::set_function_attribute(
            func,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_bytes as i32,
        )
        .map_err(|e| format!("{e:?}"))?;
        let dim = compiled.cube_dim;
        Ok(Loaded {
            func,
            block: (dim.x, dim.y, dim.z),
            shared_bytes,
        })
    }
}

/// One launch's tensors, in the kernel's argument order, and its runtime scalars.
pub(super) struct Arguments<'a> {
    /// `(tensor, its device address)` for p, bias, labels, loss, predictions, dz_half,
    /// row_weights, z_weights, lse, entropy.
    pub tensors: [(&'a CubeTensor<CudaRuntime>, u64); 10],
    pub first: usize,
    pub batch: usize,
    pub floats: [f32; 4],
    /// The vector width of p, bias and dz_half (the kernel's `N`); the others are scalar.
    pub vector: usize,
}

/// The info block of a launch (scalars, static metadata) and the dynamic metadata after it,
/// laid out by CubeCL's `InfoBuilder` as its launcher lays them out: the first
/// `dynamic_offset` words go by value, the rest in a device buffer.
pub(super) struct Info {
    pub words: Vec<u64>,
    pub dynamic_offset: usize,
}

/// The info of a launch with `arguments`.
pub(super) fn info(arguments: &Arguments<'_>) -> Info {
    let address = AddressType::U32;
    let mut info = InfoBuilder::default();
    for (k, (tensor, _)) in arguments.tensors.iter().enumerate() {
        // As CubeCL's launcher registers a tensor of vectors: its buffer's length and its
        // length counted in vectors, its shape and strides in elements.
        let vector = if matches!(k, 0 | 1 | 5) {
            arguments.vector
        } else {
            1
        };
        let elem_bytes = tensor.dtype.size() * vector;
        let arg = (*tensor).clone().into_tensor_arg();
        let TensorArg::Handle { handle } = arg else {
            unreachable!("a tensor argument with its own buffer")
        };
        let buffer_len = handle.handle.size_in_used() / elem_bytes as u64;
        let len = (handle.shape.iter().product::<usize>() / vector) as u64;
        info.metadata.register_tensor(
            handle.strides.len() as u64,
            buffer_len,
            len,
            handle.shape.clone(),
            handle.strides.clone(),
            address,
        );
    }
    let unsigned = address.unsigned_type();
    info.scalars
        .push_raw(&(arguments.first as u32).to_ne_bytes(), unsigned);
    info.scalars
        .push_raw(&(arguments.batch as u32).to_ne_bytes(), unsigned);
    for value in arguments.floats {
        info.scalars.push(value);
    }
    let finished = info.finish(address);
    Info {
        words: finished.data,
        dynamic_offset: finished.dynamic_metadata_offset,
    }
}

/// Queues `kernel` on `stream` with `count` cubes.
///
/// # Safety
/// The tensors' addresses are live buffers of the stream's device, laid out as the tensors
/// say, until the stream has run the kernel; `dynamic` is the device address of `info`'s words
/// from `dynamic_offset` on (or absent where there are none); nothing else writes them meanwhile.
pub(super) unsafe fn launch(
    kernel: &Loaded,
    stream: sys::CUstream,
    count: (u32, u32, u32),
    arguments: &Arguments<'_>,
    info: &mut Info,
    dynamic: Option<u64>,
) {
    let mut addresses: Vec<u64> = arguments.tensors.iter().map(|(_, a)| *a).collect();
    addresses.extend(dynamic);
    let mut params: Vec<*mut c_void> = addresses
        .iter_mut()
        .map(|a| a as *mut u64 as *mut c_void)
        .collect();
    params.push(info.words.as_mut_ptr() as *mut c_void);
    // SAFETY: the caller's contract; the parameters live until the call returns (CUDA copies
    // them at launch).
    unsafe {
        cudarc::driver::result::launch_kernel(
            kernel.func,
            count,
            kernel.block,
            kernel.shared_bytes,
            stream,
            &mut params,
        )
    }
    .expect("launch the row kernel on cuBLASLt's stream");
}
