//! The streamed path's chunks on NVIDIA's cuBLASLt, for `R` = CUDA where it loads: the
//! products on cuBLASLt's stream, the row kernel on CubeCL's, ordered from the host.

use std::any::Any;

use burn::tensor::{DType, TensorMetadata};
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::cuda::CudaRuntime;

use super::super::cublaslt::{self, Element, Gemm};
use super::super::launch::empty_of;
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

/// Every chunk on cuBLASLt; false (nothing done) where `R` is not CUDA or cuBLASLt does not
/// load on the device.
///
/// The order between cuBLASLt's stream and CubeCL's is kept from the host: per chunk, wait
/// for CubeCL (the inputs, the row kernel), enqueue the products of the previous chunk (dX,
/// db as `dZ^T 1`, dW) and the logits of this one, and wait for them. One chunk buffer serves every chunk: on
/// cuBLASLt's one stream, the previous chunk's dX and dW products read it before the next
/// logits overwrite it.
pub(super) fn run<R: CubeRuntime>(chunk: &Chunk<'_, R>, rows: usize, grads: &mut Grads<R>) -> bool {
    let Some(x) = (chunk.x as &dyn Any).downcast_ref::<CubeTensor<CudaRuntime>>() else {
        return false;
    };
    let Some(engine) = cublaslt::engine(x.device.index) else {
        return false;
    };
    let mut engine = engine.lock().expect("cuBLASLt engine");
    let [batch, inputs] = [chunk.batch, chunk.x.shape()[1]];
    let classes = chunk.weight.shape()[0];
    let tf32 = chunk.tf32;
    // X's, W's and dX's type (dZ's too, as an operand); P, dW and db are f32.
    let operand = element(chunk.x.dtype);
    let sums = Element::F32;
    let size = operand.bytes();
    let buffer = empty_of::<R>(chunk.x, [rows, classes], DType::F32); // [rows, C], every chunk's P
    let ptr = |t: &CubeTensor<R>| pointer(t);
    let (x_ptr, w_ptr, p_ptr) = (ptr(chunk.x), ptr(chunk.weight), ptr(&buffer));
    // dZ as the dX and dW products' operand: P itself, or its copy in the inputs' type.
    let dz_ptr = if chunk.half {
        ptr(chunk.dz_half)
    } else {
        p_ptr
    };
    let dx_ptr = grads.x.as_ref().map(ptr);
    let dw_ptr = grads.weight.as_ref().map(ptr);
    // db as the product dZ^T 1: a vector of `rows` ones.
    let ones = grads.bias.as_ref().map(|db| {
        burn_cubecl::ops::numeric::ones_client(
            db.client.clone(),
            db.device.clone(),
            [rows].into(),
            db.dtype,
        )
    });
    let db_ptr = grads.bias.as_ref().map(ptr);
    let ones_ptr = ones.as_ref().map(ptr);

    // The previous chunk's (first, n), whose dZ is in the buffer.
    let mut previous: Option<(usize, usize)> = None;
    let mut first = 0;
    while first < batch || previous.is_some() {
        wait_for_cubecl(chunk.x);
        if let Some((prev, n)) = previous.take() {
            // SAFETY: every pointer is of a live buffer of this device, its layout as the
            // Gemm describes; CubeCL wrote them before the wait above and touches none of
            // them until the engine's stream is synchronised below.
            unsafe {
                if let Some(dx) = dx_ptr {
                    let gemm =
                        Gemm::input_gradient(n, inputs, classes, tf32).typed(operand, operand);
                    let dx_rows = dx + (prev * inputs) as u64 * size;
                    engine.run(gemm, w_ptr, dz_ptr, dx_rows, 0.0);
                }
                if let (Some(db), Some(ones)) = (db_ptr, ones_ptr) {
                    let gemm = Gemm::bias_gradient(n, classes);
                    let beta = if prev == 0 { 0.0 } else { 1.0 };
                    engine.run(gemm, p_ptr, ones, db, beta);
                }
                if let Some(dw) = dw_ptr {
                    let gemm = Gemm::weight_gradient(n, inputs, classes, tf32).typed(operand, sums);
                    let x_rows = x_ptr + (prev * inputs) as u64 * size;
                    let beta = if prev == 0 { 0.0 } else { 1.0 };
                    engine.run(gemm, x_rows, dz_ptr, dw, beta);
                }
            }
        }
        if first < batch {
            let n = rows.min(batch - first);
            // SAFETY: as above; P's first n rows are written.
            unsafe {
                let gemm = Gemm::logits(n, inputs, classes, tf32).typed(operand, sums);
                let x_rows = x_ptr + (first * inputs) as u64 * size;
                engine.run(gemm, w_ptr, x_rows, p_ptr, 0.0);
            }
            engine.synchronize();
            let p = rows_view(&buffer, n);
            (chunk.launch_rows)(&p, chunk, first);
            super::note_memory(&p);
            previous = Some((first, n));
            first += n;
        } else {
            engine.synchronize();
        }
    }
    true
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

/// The device address of a CUDA tensor's first element.
fn pointer<R: CubeRuntime>(t: &CubeTensor<R>) -> u64 {
    let t = (t as &dyn Any)
        .downcast_ref::<CubeTensor<CudaRuntime>>()
        .expect("a CUDA tensor");
    t.client
        .get_resource(t.handle.clone())
        .expect("the device address of a CUDA buffer")
        .resource()
        .ptr
}

/// Blocks until CubeCL's queue on `like`'s device has run.
fn wait_for_cubecl<R: CubeRuntime>(like: &CubeTensor<R>) {
    cubecl::future::block_on(like.client.sync()).expect("CubeCL sync");
}
