//! Train a real classifier end to end with the fused head.
//!
//! A two-layer MLP on the UCI handwritten digits (1797 images of 8x8, shipped inside the
//! `smartcore` crate): stock `Linear` 64 -> 64, ReLU, then our ReLU head 64 -> 10, trained with
//! Adam on mini-batches. The same training with Burn's stock head (Linear + relu +
//! CrossEntropyLoss) from the same initial weights runs beside it, and both curves are printed.
//! The trained model is saved with Burn's recorder, loaded back, and evaluated again.
//!
//! cargo run --release --example train_digits                   # NdArray
//! cargo run --release --example train_digits --features cuda    # the CUDA kernels
//! cargo run --release --example train_digits --features wgpu    # the wgpu kernels

#![allow(dead_code)] // the test suite includes this file for its functions

use std::io::{IsTerminal, Write};

use burn::module::{AutodiffModule, Module, Param};
use burn::nn::Linear;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Element, ElementConversion, Int, Tensor, TensorData};
use burn_fused_head::{FusedHeadBackend, FusedLinearCrossEntropy, HeadActivation, HeadOptions};
use burn_fused_head_testing::reference::seeded_uniform;

/// Adam's learning rate.
pub const LEARNING_RATE: f64 = 1e-3;

/// The digits, standardised with the training split's statistics.
pub struct Digits {
    pub train_x: Vec<f32>,
    pub train_y: Vec<i64>,
    pub test_x: Vec<f32>,
    pub test_y: Vec<i64>,
    pub features: usize,
}

/// Loads the digits, shuffles them with `seed`, keeps 20% for test, standardises each feature.
pub fn load_digits(seed: u64) -> Digits {
    let data = smartcore::dataset::digits::load_dataset();
    let (n, f) = (data.num_samples, data.num_features);
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = seed;
    for i in (1..n).rev() {
        // xorshift64*, a fixed portable shuffle
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(
            i,
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) % (i as u64 + 1)) as usize,
        );
    }
    let n_test = n / 5;
    let (test_idx, train_idx) = order.split_at(n_test);
    let rows = |idx: &[usize]| -> (Vec<f32>, Vec<i64>) {
        let x = idx
            .iter()
            .flat_map(|&r| data.data[r * f..(r + 1) * f].iter().copied())
            .collect();
        let y = idx.iter().map(|&r| data.target[r] as i64).collect();
        (x, y)
    };
    let (mut train_x, train_y) = rows(train_idx);
    let (mut test_x, test_y) = rows(test_idx);
    for j in 0..f {
        let col = || train_x.iter().skip(j).step_by(f);
        let mean = col().sum::<f32>() / train_idx.len() as f32;
        let var = col().map(|v| (v - mean).powi(2)).sum::<f32>() / train_idx.len() as f32;
        let std = if var > 0.0 { var.sqrt() } else { 1.0 };
        for x in [&mut train_x, &mut test_x] {
            x.iter_mut()
                .skip(j)
                .step_by(f)
                .for_each(|v| *v = (*v - mean) / std);
        }
    }
    Digits {
        train_x,
        train_y,
        test_x,
        test_y,
        features: f,
    }
}

/// Which head ends the MLP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HeadKind {
    /// Our `FusedLinearCrossEntropy`, with the ReLU.
    Fused,
    /// Burn's `Linear` + relu + `CrossEntropyLoss`.
    Stock,
}

#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    /// The hidden layer, 64 -> 64 (then ReLU).
    pub hidden: Linear<B>,
    /// Our head, 64 -> 10.
    pub fused: FusedLinearCrossEntropy<B>,
    /// Burn's head from the same weights (then ReLU and `CrossEntropyLoss`).
    pub stock: Linear<B>,
}

impl<B: FusedHeadBackend> Mlp<B> {
    /// Weights from `seed`, the same on every backend: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), Burn's
    /// `Linear` default range, except the head's bias (below). Both heads start from the same weights (the stock Linear stores W
    /// transposed).
    pub fn new(device: &B::Device, hidden: usize, seed: u64) -> Self {
        let (k_in, k_hidden) = (1.0 / 8.0, 1.0 / (hidden as f64).sqrt()); // fan_in 64, hidden
        let fused = FusedLinearCrossEntropy {
            weight: Param::from_tensor(seeded_uniform(seed, [10, hidden], k_hidden, device)),
            // Shifted to U(1 - k, 1 + k): where an example's every ReLU logit is dead (Z <= 0)
            // nothing moves it again (dZ = 0), so the head starts with every class alive.
            // With b ~ U(-k, k) about 10% of the test set stayed stuck (89.4% accuracy).
            bias: Some(Param::from_tensor(
                seeded_uniform(seed + 1, [10], k_hidden, device) + 1.0,
            )),
            options: HeadOptions::new().with_activation(HeadActivation::Relu),
        };
        let first = Linear {
            weight: Param::from_tensor(seeded_uniform(seed + 2, [64, hidden], k_in, device)),
            bias: Some(Param::from_tensor(seeded_uniform(
                seed + 3,
                [hidden],
                k_in,
                device,
            ))),
        };
        let stock = Linear {
            weight: Param::from_tensor(fused.weight.val().transpose().detach()),
            bias: Some(Param::from_tensor(
                fused.bias.as_ref().expect("b").val().detach(),
            )),
        };
        Self {
            hidden: first,
            fused,
            stock,
        }
    }

    fn features(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        burn::tensor::activation::relu(self.hidden.forward(x)) // [B, hidden]
    }

    pub fn loss(&self, kind: HeadKind, x: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let h = self.features(x);
        match kind {
            HeadKind::Fused => self.fused.forward_loss(h, labels),
            HeadKind::Stock => {
                let logits = burn::tensor::activation::relu(self.stock.forward(h)); // [B, 10]
                CrossEntropyLossConfig::new()
                    .init(&logits.device())
                    .forward(logits, labels)
            }
        }
    }

    pub fn logits(&self, kind: HeadKind, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let h = self.features(x);
        match kind {
            HeadKind::Fused => self.fused.forward(h),
            HeadKind::Stock => burn::tensor::activation::relu(self.stock.forward(h)),
        }
    }
}

/// One epoch's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Epoch {
    pub train_loss: f64,
    pub test_loss: f64,
    pub test_accuracy: f64,
}

fn tensors<B: Backend>(
    x: &[f32],
    y: &[i64],
    features: usize,
    device: &B::Device,
) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let n = y.len();
    (
        Tensor::from_data(
            TensorData::new(x.to_vec(), [n, features]),
            (device, DType::F32),
        ),
        Tensor::from_data(
            TensorData::new(y.to_vec(), [n]),
            (device, <B::IntElem as Element>::dtype()),
        ),
    )
}

/// Test loss and accuracy of `model`.
pub fn evaluate<B: FusedHeadBackend>(
    model: &Mlp<B>,
    kind: HeadKind,
    digits: &Digits,
    device: &B::Device,
) -> (f64, f64) {
    let (x, y) = tensors::<B>(&digits.test_x, &digits.test_y, digits.features, device);
    let loss = model
        .loss(kind, x.clone(), y.clone())
        .into_scalar()
        .elem::<f64>();
    let predicted = model.logits(kind, x).argmax(1).squeeze_dim::<1>(1);
    let correct = predicted.equal(y).int().sum().into_scalar().elem::<i64>();
    (loss, correct as f64 / digits.test_y.len() as f64)
}

/// Trains the MLP with `kind` for `epochs` on mini-batches of `batch`, from `seed`.
pub fn train<B>(
    kind: HeadKind,
    digits: &Digits,
    epochs: usize,
    batch: usize,
    seed: u64,
    device: &B::Device,
    progress: bool,
) -> (Mlp<B>, Vec<Epoch>)
where
    B: AutodiffBackend + FusedHeadBackend,
    B::InnerBackend: FusedHeadBackend,
{
    let mut model = Mlp::<B>::new(device, 64, seed);
    let mut optim = AdamConfig::new().init();
    let n = digits.train_y.len();
    let f = digits.features;
    let progress = progress && std::io::stderr().is_terminal();
    let mut curve = Vec::new();
    for epoch in 0..epochs {
        let mut total = 0.0;
        let batches = n.div_ceil(batch);
        for k in 0..batches {
            let (lo, hi) = (k * batch, ((k + 1) * batch).min(n));
            let (x, y) = tensors::<B>(
                &digits.train_x[lo * f..hi * f],
                &digits.train_y[lo..hi],
                f,
                device,
            );
            let loss = model.loss(kind, x, y);
            total += loss.clone().into_scalar().elem::<f64>() * (hi - lo) as f64;
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(LEARNING_RATE, model, grads);
            if progress {
                let done = (k + 1) * 30 / batches;
                eprint!(
                    "\r  epoch {:>2} [{}{}] {}/{}",
                    epoch + 1,
                    "#".repeat(done),
                    " ".repeat(30 - done),
                    k + 1,
                    batches
                );
                std::io::stderr().flush().ok();
            }
        }
        if progress {
            eprint!("\r{}\r", " ".repeat(60));
        }
        let (test_loss, test_accuracy) = evaluate(&model.valid(), kind, digits, device);
        curve.push(Epoch {
            train_loss: total / n as f64,
            test_loss,
            test_accuracy,
        });
    }
    (model, curve)
}

fn run<B>(backend: &str, device: B::Device)
where
    B: AutodiffBackend + FusedHeadBackend,
    B::InnerBackend: FusedHeadBackend,
{
    let (epochs, batch, seed) = (20, 64, 2026);
    let digits = load_digits(seed);
    println!(
        "UCI digits: {} train, {} test, 64 features; MLP 64 -> 64 -> 10; Adam lr 1e-3, batch {batch}; {backend}",
        digits.train_y.len(),
        digits.test_y.len()
    );
    let (model, fused) = train::<B>(HeadKind::Fused, &digits, epochs, batch, seed, &device, true);
    let (_, stock) = train::<B>(HeadKind::Stock, &digits, epochs, batch, seed, &device, true);
    println!(
        "| epoch | fused train loss | fused test loss | fused test acc | stock train loss | stock test loss | stock test acc |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for (e, (a, b)) in fused.iter().zip(&stock).enumerate() {
        println!(
            "| {} | {:.6} | {:.6} | {:.2}% | {:.6} | {:.6} | {:.2}% |",
            e + 1,
            a.train_loss,
            a.test_loss,
            100.0 * a.test_accuracy,
            b.train_loss,
            b.test_loss,
            100.0 * b.test_accuracy
        );
    }

    // Save, load into a fresh model, evaluate again.
    let path = std::env::temp_dir().join("burn_fused_head_digits");
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let inner = model.valid();
    let (_, acc_before) = evaluate(&inner, HeadKind::Fused, &digits, &device);
    recorder
        .record(inner.into_record(), path.clone())
        .expect("save");
    let loaded = Mlp::<B::InnerBackend>::new(&device, 64, 0)
        .load_record(recorder.load(path, &device).expect("load"));
    let (_, acc_after) = evaluate(&loaded, HeadKind::Fused, &digits, &device);
    assert_eq!(acc_before, acc_after, "reloaded model predicts differently");
    let last = fused.last().unwrap();
    println!(
        "summary: fused head reached {:.2}% test accuracy (test loss {:.4}) after {epochs} epochs; stock head {:.2}%; reloaded model {:.2}%",
        100.0 * last.test_accuracy,
        last.test_loss,
        100.0 * stock.last().unwrap().test_accuracy,
        100.0 * acc_after
    );
}

fn main() {
    #[cfg(feature = "cuda")]
    run::<burn::backend::Autodiff<burn::backend::Cuda>>("Cuda (CUDA kernels)", Default::default());
    #[cfg(all(feature = "wgpu", not(feature = "cuda")))]
    run::<burn::backend::Autodiff<burn::backend::Vulkan>>(
        "Vulkan (wgpu kernels)",
        Default::default(),
    );
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    run::<burn::backend::Autodiff<burn::backend::NdArray>>("NdArray", Default::default());
}
