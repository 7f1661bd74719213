//! What the op is checked and measured against, shared by tests, examples and benches:
//! Burn's stock head, and deterministic inputs that are identical on every backend.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Element, Int, Tensor, TensorData};

/// Burn's stock head, built from stock ops only: `relu(X W^T + b)` then `CrossEntropyLoss`.
/// X `[B, I]`, W `[C, I]`, b `[C]`, labels `[B]`; returns the mean loss, `[1]`.
pub fn stock_head_loss<B: Backend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let h = burn::tensor::activation::relu(x.matmul(weight.transpose()) + bias.unsqueeze_dim(0)); // [B, C]
    CrossEntropyLossConfig::new()
        .init(&h.device())
        .forward(h, labels) // [1]
}

/// Burn's stock `Linear` + `CrossEntropyLoss`, from stock ops only: the cross-entropy of the
/// logits `X W^T + b` themselves (the reference of [`HeadActivation::Identity`](crate::HeadActivation)).
/// Shapes as [`stock_head_loss`].
pub fn stock_linear_loss<B: Backend>(
    x: Tensor<B, 2>,
    weight: Tensor<B, 2>,
    bias: Tensor<B, 1>,
    labels: Tensor<B, 1, Int>,
) -> Tensor<B, 1> {
    let logits = x.matmul(weight.transpose()) + bias.unsqueeze_dim(0); // [B, C]
    CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, labels) // [1]
}

/// Inputs of one pass as host data: f32-representable values, so that an f32 backend and the
/// f64 reference see exactly the same numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadData {
    /// B.
    pub batch: usize,
    /// I.
    pub inputs: usize,
    /// C.
    pub classes: usize,
    /// X `[B, I]`, row-major.
    pub x: Vec<f32>,
    /// W `[C, I]`, row-major.
    pub weight: Vec<f32>,
    /// b `[C]`.
    pub bias: Vec<f32>,
    /// labels `[B]`.
    pub labels: Vec<i64>,
}

impl HeadData {
    /// Deterministic pseudo-random inputs from `seed`: X ~ U(-1, 1), W ~ U(-k, k) with
    /// `k = 2/sqrt(I)` (so about half of Z is positive and the logits are O(1)),
    /// b ~ U(-0.1, 0.1), labels uniform in `[0, C)`.
    pub fn random(seed: u64, batch: usize, inputs: usize, classes: usize) -> Self {
        let mut rng = SplitMix64(seed);
        let k = 2.0 / (inputs.max(1) as f64).sqrt();
        Self {
            batch,
            inputs,
            classes,
            x: (0..batch * inputs)
                .map(|_| rng.uniform(-1.0, 1.0))
                .collect(),
            weight: (0..classes * inputs).map(|_| rng.uniform(-k, k)).collect(),
            bias: (0..classes).map(|_| rng.uniform(-0.1, 0.1)).collect(),
            labels: (0..batch)
                .map(|_| (rng.next() % classes.max(1) as u64) as i64)
                .collect(),
        }
    }

    /// The same inputs with X, W and b rounded to `dtype` (bf16 or f16, to nearest even), so
    /// that a backend computing on that type and the f64 reference see the same numbers.
    /// Other dtypes leave the values as they are.
    pub fn rounded_to(&self, dtype: DType) -> Self {
        let round = |v: &[f32]| -> Vec<f32> {
            v.iter()
                .map(|&v| match dtype {
                    DType::BF16 => burn::tensor::bf16::from_f32(v).to_f32(),
                    DType::F16 => burn::tensor::f16::from_f32(v).to_f32(),
                    _ => v,
                })
                .collect()
        };
        Self {
            x: round(&self.x),
            weight: round(&self.weight),
            bias: round(&self.bias),
            ..self.clone()
        }
    }

    /// The four tensors on `device`, floats in `float_dtype`, labels in the backend's int dtype.
    pub fn tensors<B: Backend>(
        &self,
        device: &B::Device,
        float_dtype: DType,
    ) -> (Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 1, Int>) {
        let float = |v: &[f32], shape: Vec<usize>| TensorData::new(v.to_vec(), shape);
        (
            Tensor::from_data(
                float(&self.x, vec![self.batch, self.inputs]),
                (device, float_dtype),
            ),
            Tensor::from_data(
                float(&self.weight, vec![self.classes, self.inputs]),
                (device, float_dtype),
            ),
            Tensor::from_data(float(&self.bias, vec![self.classes]), (device, float_dtype)),
            Tensor::from_data(
                TensorData::new(self.labels.clone(), [self.batch]),
                (device, <B::IntElem as Element>::dtype()),
            ),
        )
    }
}

/// A tensor of `shape` with values uniform in `[-bound, bound)` from `seed`, the same on every
/// backend (Burn's own random init draws from each backend's generator, so runs on NdArray and
/// CUDA would start from different weights).
pub fn seeded_uniform<B: Backend, const D: usize>(
    seed: u64,
    shape: [usize; D],
    bound: f64,
    device: &B::Device,
) -> Tensor<B, D> {
    let mut rng = SplitMix64(seed);
    let n = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|_| rng.uniform(-bound, bound)).collect();
    Tensor::from_data(TensorData::new(values, shape), (device, DType::F32))
}

/// SplitMix64: a tiny, fixed, portable generator, so inputs do not depend on a crate version.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`, rounded to f32.
    fn uniform(&mut self, lo: f64, hi: f64) -> f32 {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (lo + (hi - lo) * unit) as f32
    }
}
