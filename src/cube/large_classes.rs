//! The fast path for C > 32 (`kernels::large_classes`): compute-bound, three products of
//! 2 B I C FLOPs each with the row work between them.
//!
//! Forward: `Z = X W^T + b` and `H = act(Z)` tiled, then the softmax cross-entropy per row
//! and the mean. Backward: the masked gradient dZ, db as column sums, then `dW = dZ^T X` and
//! `dX = dZ W` tiled, K split into slices added in order when the output has few tiles. Exact
//! f32 on the FMA units, or, with TF32 allowed and available, on tensor cores: Burn's cubek
//! kernel where it takes the problem ([`cubek_tf32`]), else our own `cmma` kernels.

use burn::tensor::TensorMetadata;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fused_head_kernels::large_classes as kernels;
use cubecl::server::CubeCountSelection;
use cubecl::{CubeCount, CubeDim};

use super::cubek_tf32::{self, Product};
use super::launch::{
    CUBE_UNITS, by_label_type, contiguous, elementwise, empty, mean_of_parts, partial_sum,
    vector_size,
};
use crate::backend::{HeadGradients, HeadWanted};

/// Tiles an output should have to fill a GPU; fewer, and the tiled product splits K. Tuning:
/// about two tiles per SM of a large GPU (132 SMs on the H200). A rule of the shape alone
/// (never of the device), so the same inputs give the same bits everywhere.
const ENOUGH_TILES: usize = 256;
/// The split-K partials stay below this many elements. Invariant of memory: 2^25 floats is
/// 128 MiB of temporaries at most.
const MAX_SPLIT_ELEMENTS: usize = 1 << 25;
/// K is cut into at most ceil(K / MIN_SLICE) slices, so a slice is more than MIN_SLICE / 2
/// deep (16 steps of the exact kernel's depth of 8, 8 of the TF32 kernel's 16). Tuning.
const MIN_SLICE: usize = 256;
/// At most this many slices of K. Tuning: a bound on the partials' size and on the slices the
/// in-order sum walks.
const MAX_SLICES: usize = 64;

/// The forward: `(loss [1], Z [B, C], dH [B, C])`; the products on TF32 tensor cores with
/// `tf32` (the caller checked that the device has them).
pub(super) fn forward<R: CubeRuntime, F: FloatElement>(
    op: &str,
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    labels: CubeTensor<R>,
    tf32: bool,
    relu: bool,
) -> (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>) {
    let (z, h) = linear_activation::<R, F>(x, weight, bias, tf32, relu); // [B, C] each
    let (loss_rows, dh) = softmax_cross_entropy::<R, F>(op, h, labels); // [B], [B, C]
    let batch = loss_rows.shape()[0];
    (mean_of_parts::<R, F>(loss_rows, batch), z, dh)
}

/// The logits alone: H `[B, C]`. With `tf32` and where cubek takes the product, bias and activation
/// in place of the product: no Z is ever allocated. Elsewhere, the forward's tiled kernels,
/// whose Z is dropped.
pub(super) fn logits<R: CubeRuntime, F: FloatElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    tf32: bool,
    relu: bool,
) -> CubeTensor<R> {
    let (x, weight, bias) = (contiguous(x), contiguous(weight), contiguous(bias));
    if let Some(h) = tf32.then(|| cubek_logits_product(&x, &weight)).flatten() {
        if let Some((count, dim)) = elementwise(&h, h.shape().num_elements()) {
            // SAFETY: the kernel guards every access by the product's length; it and b are
            // contiguous.
            unsafe {
                kernels::forward::bias_activation_in_place::launch_unchecked::<F, R>(
                    &h.client,
                    count,
                    dim,
                    h.clone().into_tensor_arg(),
                    bias.into_tensor_arg(),
                    relu,
                );
            }
        }
        return h;
    }
    tiled_linear_activation::<R, F>(x, weight, bias, tf32, relu).1
}

/// Stage 1 tiled: `(Z, H)`, `[B, C]` each. With `tf32`, cubek's TF32 product where it takes
/// the problem, then bias and activation (Z in place, H); elsewhere our own kernels.
fn linear_activation<R: CubeRuntime, F: FloatElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    tf32: bool,
    relu: bool,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let (x, weight, bias) = (contiguous(x), contiguous(weight), contiguous(bias));
    let [batch, classes] = [x.shape()[0], weight.shape()[0]];
    if let Some(z) = tf32.then(|| cubek_logits_product(&x, &weight)).flatten() {
        let h = empty::<R>(&z, [batch, classes]); // [B, C]
        if let Some((count, dim)) = elementwise(&z, batch * classes) {
            // SAFETY: the kernel guards every access by Z's length; Z, H, b are contiguous.
            unsafe {
                kernels::forward::bias_activation::launch_unchecked::<F, R>(
                    &z.client,
                    count,
                    dim,
                    z.clone().into_tensor_arg(),
                    bias.into_tensor_arg(),
                    h.clone().into_tensor_arg(),
                    relu,
                );
            }
        }
        return (z, h);
    }
    tiled_linear_activation::<R, F>(x, weight, bias, tf32, relu)
}

/// `P = X W^T` `[B, C]` on cubek's TF32 kernel for contiguous X and W, where it takes them;
/// `None` elsewhere. Bias and activation are the caller's.
fn cubek_logits_product<R: CubeRuntime>(
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
) -> Option<CubeTensor<R>> {
    let w_t = burn_cubecl::ops::permute(weight.clone(), &[1, 0]); // [I, C] view
    cubek_tf32::product(x.clone(), w_t, Product::Logits)
}

/// Stage 1 on our own tiled kernels: `(Z, H)`, `[B, C]` each, for contiguous X, W and b;
/// exact f32, or on TF32 tensor cores (`cmma`) with `tf32`.
fn tiled_linear_activation<R: CubeRuntime, F: FloatElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: CubeTensor<R>,
    tf32: bool,
    relu: bool,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let [batch, inputs] = [x.shape()[0], x.shape()[1]];
    let classes = weight.shape()[0];
    let z = empty::<R>(&x, [batch, classes]); // [B, C]
    let h = empty::<R>(&x, [batch, classes]); // [B, C]
    if batch * classes == 0 {
        return (z, h);
    }
    let grid = tile_grid("head_forward", batch, classes, 1);
    let (client, x, w, b) = (
        &x.client,
        x.clone().into_tensor_arg(),
        weight.into_tensor_arg(),
        bias.into_tensor_arg(),
    );
    let (z_arg, h_arg) = (z.clone().into_tensor_arg(), h.clone().into_tensor_arg());
    // SAFETY: the kernels guard every global read and write by the shapes; X and W are
    // contiguous with I their last dimension, which the TF32 kernel's vector width divides.
    unsafe {
        if tf32 {
            let vector = vector_size(inputs, 4);
            kernels::forward::forward_tf32::launch_unchecked::<F, R>(
                client,
                grid,
                CubeDim::new_1d(kernels::tf32_matmul::UNITS),
                vector,
                x,
                w,
                b,
                z_arg,
                h_arg,
                4 / vector,
                relu,
            );
        } else {
            kernels::forward::forward_exact::launch_unchecked::<F, R>(
                client,
                grid,
                CubeDim::new_1d(kernels::matmul::UNITS),
                x,
                w,
                b,
                z_arg,
                h_arg,
                relu,
            );
        }
    }
    (z, h)
}

/// Per-row loss [B] and dH [B, C] of H, one cube per row (stage 2's algebra, the fast path's
/// own launch).
fn softmax_cross_entropy<R: CubeRuntime, F: FloatElement>(
    op: &str,
    h: CubeTensor<R>,
    labels: CubeTensor<R>,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let [batch, classes] = [h.shape()[0], h.shape()[1]];
    let labels = contiguous(labels);
    let loss = empty::<R>(&h, [batch]); // [B]
    let dh = empty::<R>(&h, [batch, classes]); // [B, C]
    if batch > 0 {
        let launch = by_label_type!(op, labels.dtype, launch_softmax_cross_entropy::<R, F>);
        launch(&h, &labels, &loss, &dh);
    }
    (loss, dh)
}

/// [`softmax_cross_entropy`]'s launch for labels of type `L`; idle cubes past B (hardware
/// limits on one axis) leave at once.
fn launch_softmax_cross_entropy<R: CubeRuntime, F: FloatElement, L: IntElement>(
    h: &CubeTensor<R>,
    labels: &CubeTensor<R>,
    loss: &CubeTensor<R>,
    dh: &CubeTensor<R>,
) {
    let count = CubeCountSelection::new(&h.client, h.shape()[0] as u32).cube_count();
    // SAFETY: the kernel guards every access by H's shape; H (made by this path) and the
    // labels are contiguous, loss is [B] and dH [B, C].
    unsafe {
        kernels::rows::softmax_cross_entropy_rows::launch_unchecked::<F, L, R>(
            &h.client,
            count,
            CubeDim::new_1d(CUBE_UNITS),
            h.clone().into_tensor_arg(),
            labels.clone().into_tensor_arg(),
            loss.clone().into_tensor_arg(),
            dh.clone().into_tensor_arg(),
            f32::NAN,
            CUBE_UNITS as usize,
        );
    }
}

/// The backward: dZ and db, then dW = dZ^T X and dX = dZ W tiled (on TF32 tensor cores with
/// `tf32`), for the wanted gradients only.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    z: CubeTensor<R>,
    dh: CubeTensor<R>,
    grad_loss: CubeTensor<R>,
    wanted: HeadWanted,
    tf32: bool,
    relu: bool,
) -> HeadGradients<CubeBackend<R, F, I, BT>> {
    let dz = masked_gradient::<R, F>(z, dh, grad_loss, relu); // [B, C]
    let (x, weight) = (contiguous(x), contiguous(weight));
    let [batch, classes] = [dz.shape()[0], dz.shape()[1]];
    let inputs = x.shape()[1];
    HeadGradients {
        // dW [C, I] = dZ^T X: A = dZ^T read from dZ stored [B, C]; B = X stored [B, I].
        weight: wanted.weight.then(|| {
            tiled_matmul::<R, F>(
                &dz,
                &x,
                [classes, inputs],
                [false, false],
                tf32,
                Product::WeightGradient,
            )
        }),
        bias: wanted.bias.then(|| column_sums::<R, F>(&dz)),
        // dX [B, I] = dZ W: A = dZ stored [B, C]; B = W stored [C, I].
        x: wanted.x.then(|| {
            tiled_matmul::<R, F>(
                &dz,
                &weight,
                [batch, inputs],
                [true, false],
                tf32,
                Product::InputGradient,
            )
        }),
    }
}

/// `dZ = dH act'(Z) g`, `[B, C]`, one unit per element.
fn masked_gradient<R: CubeRuntime, F: FloatElement>(
    z: CubeTensor<R>,
    dh: CubeTensor<R>,
    grad_loss: CubeTensor<R>,
    relu: bool,
) -> CubeTensor<R> {
    let (z, dh, grad_loss) = (contiguous(z), contiguous(dh), contiguous(grad_loss));
    let dz = empty::<R>(&z, z.shape()); // [B, C]
    if let Some((count, dim)) = elementwise(&z, dz.shape().num_elements()) {
        // SAFETY: the kernel guards every access by dZ's length; Z, dH and dZ are contiguous
        // [B, C], g is [1].
        unsafe {
            kernels::rows::masked_gradient::launch_unchecked::<F, R>(
                &z.client,
                count,
                dim,
                z.clone().into_tensor_arg(),
                dh.into_tensor_arg(),
                grad_loss.into_tensor_arg(),
                dz.clone().into_tensor_arg(),
                relu,
            );
        }
    }
    dz
}

/// `db = column_sum(dZ)`, `[C]`, one cube per class (with B = 0 each writes 0).
fn column_sums<R: CubeRuntime, F: FloatElement>(dz: &CubeTensor<R>) -> CubeTensor<R> {
    let classes = dz.shape()[1];
    let db = empty::<R>(dz, [classes]); // [C]
    let count = CubeCountSelection::new(&dz.client, classes as u32).cube_count();
    // SAFETY: the kernel guards every access by dZ's shape; dZ is contiguous, db is [C].
    unsafe {
        kernels::rows::column_sums::launch_unchecked::<F, R>(
            &dz.client,
            count,
            CubeDim::new_1d(CUBE_UNITS),
            dz.clone().into_tensor_arg(),
            db.clone().into_tensor_arg(),
            CUBE_UNITS as usize,
        );
    }
    db
}

/// Slices of K for an `[M, N]` output: `(slices, k_per_slice)`, k_per_slice a multiple of the
/// kernel's step `depth`; at most [`MAX_SLICES`] slices, ceil(K / [`MIN_SLICE`]) slices and
/// [`MAX_SPLIT_ELEMENTS`] partial outputs.
fn split_k(m: usize, n: usize, k: usize, depth: usize) -> (usize, usize) {
    use kernels::matmul::TILE;
    let tiles = m.div_ceil(TILE) * n.div_ceil(TILE);
    let wanted = ENOUGH_TILES.div_ceil(tiles.max(1));
    let slices = wanted
        .min(k.div_ceil(MIN_SLICE))
        .min(MAX_SPLIT_ELEMENTS / (m * n).max(1))
        .clamp(1, MAX_SLICES);
    let k_per_slice = k.div_ceil(slices).div_ceil(depth).max(1) * depth;
    (k.div_ceil(k_per_slice).max(1), k_per_slice)
}

/// `A B` with a tiled product, `[M, N]`, exact f32 or on TF32 tensor cores with `tf32`; see
/// `kernels::large_classes::matmul` for the two layout flags `[a_k_contiguous,
/// b_k_contiguous]`. An output with few tiles splits K into slices added in order by
/// `partial_sum`. With `tf32` and no split, cubek's TF32 kernel where it takes the problem.
pub(super) fn tiled_matmul<R: CubeRuntime, F: FloatElement>(
    a: &CubeTensor<R>,
    b: &CubeTensor<R>,
    [m, n]: [usize; 2],
    [a_k_contiguous, b_k_contiguous]: [bool; 2],
    tf32: bool,
    product: Product,
) -> CubeTensor<R> {
    let k = a.shape()[if a_k_contiguous { 1 } else { 0 }];
    let depth = if tf32 {
        kernels::tf32_matmul::DEPTH
    } else {
        kernels::matmul::DEPTH
    };
    let (slices, k_per_slice) = split_k(m, n, k, depth);
    // TF32 with enough tiles not to split K: cubek's TF32 kernel on [M, K] and [K, N] views of
    // the stored operands (transposes in place), where it takes them.
    if tf32 && slices == 1 {
        let a_mk = if a_k_contiguous {
            a.clone()
        } else {
            burn_cubecl::ops::permute(a.clone(), &[1, 0])
        };
        let b_kn = if b_k_contiguous {
            burn_cubecl::ops::permute(b.clone(), &[1, 0])
        } else {
            b.clone()
        };
        if let Some(out) = cubek_tf32::product(a_mk, b_kn, product) {
            return out;
        }
    }
    let out = empty::<R>(a, [slices, m, n]); // one product per slice of K
    if m * n > 0 {
        // With K = 0 every tile writes zeros: the empty sum.
        let grid = tile_grid("head_backward", m, n, slices);
        let (a_arg, b_arg) = (a.clone().into_tensor_arg(), b.clone().into_tensor_arg());
        let out_arg = out.clone().into_tensor_arg();
        // SAFETY: the kernels guard every global read and write by the shapes; the operands are
        // contiguous and each TF32 vector width divides its operand's last dimension.
        unsafe {
            if tf32 {
                // Vectors along each operand's stored contiguous dimension (its last).
                let (a_vector, b_vector) =
                    (vector_size(a.shape()[1], 4), vector_size(b.shape()[1], 4));
                kernels::tf32_matmul::tf32_matmul::launch_unchecked::<F, R>(
                    &a.client,
                    grid,
                    CubeDim::new_1d(kernels::tf32_matmul::UNITS),
                    a_vector,
                    b_vector,
                    a_arg,
                    b_arg,
                    out_arg,
                    k_per_slice as u32,
                    a_k_contiguous,
                    b_k_contiguous,
                    4 / a_vector,
                    4 / b_vector,
                );
            } else {
                kernels::matmul::tiled_matmul::launch_unchecked::<F, R>(
                    &a.client,
                    grid,
                    CubeDim::new_1d(kernels::matmul::UNITS),
                    a_arg,
                    b_arg,
                    out_arg,
                    k_per_slice as u32,
                    a_k_contiguous,
                    b_k_contiguous,
                );
            }
        }
    }
    // One slice is the product itself (reshaped, no launch).
    partial_sum::<R, F>(out, [m, n])
}

/// Cube counts of the tiled and TF32 kernels (both tile by 128): (columns of tiles, rows of
/// tiles, slices of K) of an `[M, N]` output.
fn tile_grid(op: &str, m: usize, n: usize, slices: usize) -> CubeCount {
    use kernels::matmul::TILE;
    let (x, y) = (n.div_ceil(TILE), m.div_ceil(TILE));
    if y > u16::MAX as usize || x > u16::MAX as usize {
        panic!(
            "=== burn-fused-head error ===\n  Operation: '{op}'\n  Reason: an output of [{m}, {n}] \
             needs more than 65535 tiles of {TILE} along one side"
        );
    }
    CubeCount::new_3d(x as u32, y as u32, slices as u32)
}
