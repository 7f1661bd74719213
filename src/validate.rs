//! Every check on the op's inputs, in one place, shared by the public functions, the module and
//! every backend impl. Each failure panics before any kernel runs, naming the op, the shapes and
//! what was expected, in the style of Burn's own tensor checks.

use burn::tensor::{DType, Int, Tensor};

use crate::backend::HeadLimits;

/// Panics with a message in Burn's style: the operation and the reason.
fn fail(op: &str, reason: String) -> ! {
    panic!("=== burn-fused-head error ===\n  Operation: '{op}'\n  Reason: {reason}")
}

/// Panics: `what`, and the shape found.
pub(crate) fn fail_rank(op: &str, what: &str, got: &[usize]) -> ! {
    fail(op, format!("{what}, got {got:?}"))
}

/// Shapes of the whole op: X `[B, I]`, W `[C, I]`, b `[C]`, labels `[B]` (when given).
/// Returns `(B, I, C)`.
pub(crate) fn head_shapes(
    op: &str,
    x: &[usize],
    weight: &[usize],
    bias: &[usize],
    labels: Option<&[usize]>,
) -> (usize, usize, usize) {
    let (batch, inputs, classes) = linear_shapes(op, x, weight, bias);
    if let Some(labels) = labels
        && labels != [batch]
    {
        fail(
            op,
            format!("labels must be [B] = [{batch}] (one per row of X {x:?}), got {labels:?}"),
        );
    }
    (batch, inputs, classes)
}

/// Shapes of stage 1: X `[B, I]`, W `[C, I]`, b `[C]`, C >= 1. Returns `(B, I, C)`.
pub(crate) fn linear_shapes(
    op: &str,
    x: &[usize],
    weight: &[usize],
    bias: &[usize],
) -> (usize, usize, usize) {
    let [batch, inputs] = rank2(op, "X [B, I]", x);
    let [classes, w_inputs] = rank2(op, "W [C, I]", weight);
    if w_inputs != inputs {
        fail(
            op,
            format!(
                "X is [B, I] = {x:?} and W is [C, I] = {weight:?}: their I differ ({inputs} vs {w_inputs})"
            ),
        );
    }
    if bias != [classes] {
        fail(
            op,
            format!("b must be [C] = [{classes}] for W {weight:?}, got {bias:?}"),
        );
    }
    if classes == 0 {
        fail(
            op,
            "W has C = 0 classes: cross-entropy needs at least one class".into(),
        );
    }
    (batch, inputs, classes)
}

/// `name` must be rank 2; returns its two dims.
pub(crate) fn rank2(op: &str, name: &str, shape: &[usize]) -> [usize; 2] {
    match shape {
        [a, b] => [*a, *b],
        _ => fail(op, format!("{name} must have rank 2, got shape {shape:?}")),
    }
}

/// Two tensors that must have the same shape (Z and dH, dZ and a `[B, C]` partner...).
#[cfg_attr(not(feature = "cube"), allow(dead_code))]
pub(crate) fn same_shape(op: &str, a_name: &str, a: &[usize], b_name: &str, b: &[usize]) {
    if a != b {
        fail(
            op,
            format!("{a_name} {a:?} and {b_name} {b:?} must have the same shape"),
        );
    }
}

/// `dim` of `a` must equal `dim_b` of `b` (for example the B of dZ and of X).
#[cfg_attr(not(feature = "cube"), allow(dead_code))]
pub(crate) fn same_dim(op: &str, what: &str, a: &[usize], b: &[usize], dims: (usize, usize)) {
    if a.get(dims.0) != b.get(dims.1) {
        fail(op, format!("{what}: shapes {a:?} and {b:?} disagree"));
    }
}

/// Every float input has the same dtype and the implementation runs it.
pub(crate) fn float_dtypes(op: &str, limits: &HeadLimits, dtypes: &[DType]) {
    let first = dtypes[0];
    if let Some(other) = dtypes.iter().find(|d| **d != first) {
        fail(
            op,
            format!("every float input must have one dtype, got {first:?} and {other:?}"),
        );
    }
    if let Some(supported) = limits.float_dtypes
        && !supported.contains(&first)
    {
        fail(
            op,
            format!(
                "dtype {first:?} is not supported by this backend's kernels; supported: {supported:?}"
            ),
        );
    }
}

/// Every tensor the implementation will index (given as element counts, with names) fits its
/// addressing; refuses rather than wrap around.
pub(crate) fn element_counts(op: &str, limits: &HeadLimits, counts: &[(&str, usize)]) {
    for (name, count) in counts {
        if *count > limits.max_elements {
            fail(
                op,
                format!(
                    "{name} has {count} elements, more than this backend's kernels address ({}): \
                     split the batch",
                    limits.max_elements
                ),
            );
        }
    }
}

/// Every input lives on one device.
pub(crate) fn same_device<D: PartialEq + core::fmt::Debug>(op: &str, devices: &[(&str, D)]) {
    let (first_name, first) = &devices[0];
    for (name, device) in &devices[1..] {
        if device != first {
            fail(
                op,
                format!(
                    "{name} is on {device:?} but {first_name} is on {first:?}: move them to one device"
                ),
            );
        }
    }
}

/// Shapes of X, W, b and (when given) labels.
pub(crate) type HeadShapes<'a> = (&'a [usize], &'a [usize], &'a [usize], Option<&'a [usize]>);

/// The whole op's inputs: shapes, devices, dtypes and sizes, for a backend with `limits`.
/// Returns `(B, I, C)`.
pub(crate) fn head_inputs<D: PartialEq + core::fmt::Debug>(
    op: &str,
    limits: &HeadLimits,
    shapes: HeadShapes<'_>,
    devices: &[(&str, D)],
    dtypes: &[DType],
) -> (usize, usize, usize) {
    let (batch, inputs, classes) = head_shapes(op, shapes.0, shapes.1, shapes.2, shapes.3);
    same_device(op, devices);
    float_dtypes(op, limits, dtypes);
    element_counts(
        op,
        limits,
        &[
            ("X [B, I]", batch.saturating_mul(inputs)),
            ("W [C, I]", classes.saturating_mul(inputs)),
            ("Z [B, C]", batch.saturating_mul(classes)),
        ],
    );
    (batch, inputs, classes)
}

/// [`head_inputs`] for the op's tensors on backend `B` (labels, when given, are checked for
/// shape and device too). Returns `(B, I, C)`.
pub(crate) fn head_tensors<B: crate::backend::FusedHeadBackend>(
    op: &str,
    x: &Tensor<B, 2>,
    weight: &Tensor<B, 2>,
    bias: &Tensor<B, 1>,
    labels: Option<&Tensor<B, 1, Int>>,
) -> (usize, usize, usize) {
    let label_dims = labels.map(|l| l.dims());
    let mut devices = vec![
        ("X", x.device()),
        ("W", weight.device()),
        ("b", bias.device()),
    ];
    devices.extend(labels.map(|l| ("labels", l.device())));
    head_inputs(
        op,
        &B::head_limits(),
        (
            &x.dims(),
            &weight.dims(),
            &bias.dims(),
            label_dims.as_ref().map(|d| &d[..]),
        ),
        &devices,
        &[x.dtype(), weight.dtype(), bias.dtype()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CubeCL kernels' limits (32-bit addressing, f32).
    const KERNELS: HeadLimits = HeadLimits {
        float_dtypes: Some(&[DType::F32]),
        max_elements: u32::MAX as usize,
    };

    fn message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let err = std::panic::catch_unwind(f).expect_err("expected a panic");
        err.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn refuses_inputs_on_two_devices() {
        let msg = message(|| {
            head_inputs(
                "op",
                &KERNELS,
                (&[2, 3], &[4, 3], &[4], Some(&[2])),
                &[("X", 0), ("W", 1)],
                &[DType::F32],
            );
        });
        assert!(msg.contains("W is on 1 but X is on 0"), "{msg}");
    }

    #[test]
    fn refuses_sizes_past_32_bit_addressing() {
        // B I = 2^17 * 2^16 = 2^33 elements: would wrap a u32 index.
        let msg = message(|| {
            head_inputs(
                "op",
                &KERNELS,
                (&[1 << 17, 1 << 16], &[2, 1 << 16], &[2], None),
                &[("X", 0)],
                &[DType::F32],
            );
        });
        assert!(msg.contains("X [B, I] has 8589934592 elements"), "{msg}");
        // Just under the limit passes.
        head_inputs(
            "op",
            &KERNELS,
            (&[(1 << 16) - 1, 1 << 16], &[2, 1 << 16], &[2], None),
            &[("X", 0)],
            &[DType::F32],
        );
    }

    #[test]
    fn refuses_unsupported_and_mixed_dtypes() {
        let shapes: HeadShapes = (&[2, 3], &[4, 3], &[4], None);
        let msg = message(|| {
            head_inputs(
                "op",
                &KERNELS,
                shapes,
                &[("X", 0)],
                &[DType::F16, DType::F16],
            );
        });
        assert!(
            msg.contains("dtype F16 is not supported") && msg.contains("F32"),
            "{msg}"
        );
        let msg = message(|| {
            head_inputs(
                "op",
                &KERNELS,
                shapes,
                &[("X", 0)],
                &[DType::F32, DType::F64],
            );
        });
        assert!(msg.contains("one dtype"), "{msg}");
    }
}
