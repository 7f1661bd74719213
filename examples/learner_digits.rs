//! Day 100 on burn-train: the digits MLP of `train_digits` (stock `Linear` 64 -> 64, ReLU, then
//! the head 64 -> 10) trained by Burn's `Learner`, with its progress display (a terminal UI on
//! a terminal, lines of text otherwise), its loss and accuracy metrics on both splits, and its
//! checkpoints; once with our `FusedLinearCrossEntropy` (its `forward_classification`) and once with Burn's
//! stock head (`Linear` + relu + `CrossEntropyLoss`) from the same initial weights. Prints the
//! test accuracy of each trained model.
//!
//! cargo run --release --example learner_digits --features train          # NdArray
//! cargo run --release --example learner_digits --features train,cuda     # the CUDA kernels
//! cargo run --release --example learner_digits --features train,cuda -- --devices 2
//!
//! cargo run --release --example learner_digits --features ddp -- --devices 2 --ddp
//!
//! `--devices N` trains with burn-train's `ExecutionStrategy::multi` on N devices (device
//! indices 0 to N - 1 on CUDA; N copies of the one device on NdArray and Vulkan), the
//! multi-device strategy that needs no NCCL: each device runs its own batches and the main
//! device sums their gradients and steps the optimizer (`MultiDeviceOptim::OptimMainDevice`).
//! With `--ddp` (feature `ddp`: CUDA, burn-train's `ddp`, Burn's `distributed`), it trains
//! with `ExecutionStrategy::ddp` instead: one model per GPU, gradients all-reduced (the mean)
//! by NCCL during the backward pass. The feature changes Burn's `Autodiff` bounds for the
//! whole build (`Autodiff<NdArray>` is no longer an `AutodiffBackend`, Burn #4794), so it
//! stays off for the tests; see `docs/ddp.md`.

#[path = "train_digits.rs"]
mod digits;

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::Linear;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::AdamConfig;
use burn::record::CompactRecorder;
use burn::tensor::activation::relu;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Element, ElementConversion, Int, Tensor, TensorData};
use burn_fused_head::{FusedHeadBackend, FusedLinearCrossEntropy};
use burn_train::metric::{AccuracyMetric, LossMetric};
use burn_train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, Learner, MultiDeviceOptim,
    SupervisedTraining, TrainOutput, TrainStep,
};
use digits::{Digits, LEARNING_RATE, Mlp, load_digits};

/// Epochs, batch size and seed (as `train_digits`).
const EPOCHS: usize = 20;
const BATCH: usize = 64;
const SEED: u64 = 2026;

/// One example: its 64 standardised pixels and its digit.
#[derive(Clone, Debug)]
struct Digit {
    pixels: Vec<f32>,
    label: i64,
}

/// A batch: X `[n, 64]` and the labels `[n]`.
#[derive(Clone, Debug)]
struct DigitBatch<B: Backend> {
    x: Tensor<B, 2>,
    labels: Tensor<B, 1, Int>,
}

#[derive(Clone, Default)]
struct DigitBatcher;

impl<B: Backend> Batcher<B, Digit, DigitBatch<B>> for DigitBatcher {
    fn batch(&self, items: Vec<Digit>, device: &B::Device) -> DigitBatch<B> {
        let n = items.len();
        let pixels: Vec<f32> = items.iter().flat_map(|d| d.pixels.clone()).collect();
        let labels: Vec<i64> = items.iter().map(|d| d.label).collect();
        DigitBatch {
            x: Tensor::from_data(TensorData::new(pixels, [n, 64]), (device, DType::F32)),
            labels: Tensor::from_data(
                TensorData::new(labels, [n]),
                (device, <B::IntElem as Element>::dtype()),
            ),
        }
    }
}

/// The examples of one split.
fn split(x: &[f32], y: &[i64], features: usize) -> Vec<Digit> {
    y.iter()
        .enumerate()
        .map(|(r, &label)| Digit {
            pixels: x[r * features..(r + 1) * features].to_vec(),
            label,
        })
        .collect()
}

/// The MLP with our head.
#[derive(Module, Debug)]
struct FusedModel<B: Backend> {
    hidden: Linear<B>,
    head: FusedLinearCrossEntropy<B>,
}

/// The MLP with Burn's stock head.
#[derive(Module, Debug)]
struct StockModel<B: Backend> {
    hidden: Linear<B>,
    head: Linear<B>,
}

impl<B: FusedHeadBackend> FusedModel<B> {
    fn classify(&self, batch: DigitBatch<B>) -> ClassificationOutput<B> {
        let h = relu(self.hidden.forward(batch.x)); // [n, 64]
        self.head.forward_classification(h, batch.labels)
    }
}

impl<B: Backend> StockModel<B> {
    fn classify(&self, batch: DigitBatch<B>) -> ClassificationOutput<B> {
        let h = relu(self.hidden.forward(batch.x)); // [n, 64]
        let logits = relu(self.head.forward(h)); // [n, 10]
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.labels.clone());
        ClassificationOutput::new(loss, logits, batch.labels)
    }
}

/// `TrainStep` (the loss's backward) and `InferenceStep` for a model with a `classify`.
macro_rules! steps {
    ($model:ident, $bound:path) => {
        impl<B: AutodiffBackend + $bound> TrainStep for $model<B> {
            type Input = DigitBatch<B>;
            type Output = ClassificationOutput<B>;

            fn step(&self, batch: DigitBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
                let item = self.classify(batch);
                TrainOutput::new(self, item.loss.backward(), item)
            }
        }

        impl<B: $bound> InferenceStep for $model<B> {
            type Input = DigitBatch<B>;
            type Output = ClassificationOutput<B>;

            fn step(&self, batch: DigitBatch<B>) -> ClassificationOutput<B> {
                self.classify(batch)
            }
        }
    };
}
steps!(FusedModel, FusedHeadBackend);
steps!(StockModel, Backend);

/// Trains `$model` with burn-train's `Learner` for [`EPOCHS`], the test split as its
/// validation, checkpoints in `$dir`; evaluates to the trained (inner) model.
macro_rules! fit {
    ($model:expr, $digits:expr, $dir:expr, $strategy:expr) => {{
        let digits: &Digits = $digits;
        let f = digits.features;
        let train = DataLoaderBuilder::new(DigitBatcher)
            .batch_size(BATCH)
            .shuffle(SEED)
            .build(InMemDataset::new(split(
                &digits.train_x,
                &digits.train_y,
                f,
            )));
        let valid = DataLoaderBuilder::new(DigitBatcher)
            .batch_size(BATCH)
            .build(InMemDataset::new(split(&digits.test_x, &digits.test_y, f)));
        let dir = $dir;
        let _ = std::fs::remove_dir_all(&dir);
        let training = SupervisedTraining::new(&dir, train, valid)
            .metrics((AccuracyMetric::new(), LossMetric::new()))
            .with_file_checkpointer(CompactRecorder::new())
            .num_epochs(EPOCHS)
            .summary();
        let training = match $strategy {
            Some(strategy) => training.with_training_strategy(strategy.into()),
            None => training,
        };
        let learner = Learner::new($model, AdamConfig::new().init(), LEARNING_RATE);
        training.launch(learner).model
    }};
}

/// The share of the test split whose predicted class (the argmax of `output`) is the label.
fn accuracy<B: Backend>(out: ClassificationOutput<B>) -> f64 {
    let n = out.targets.dims()[0];
    let predicted = out.output.argmax(1).squeeze_dim::<1>(1);
    let correct = predicted.equal(out.targets).int().sum().into_scalar();
    correct.elem::<i64>() as f64 / n as f64
}

/// burn-train's strategy for `devices`: none (its default, one device) for one,
/// `ExecutionStrategy::multi` for more.
fn multi<B: AutodiffBackend>(devices: &[B::Device]) -> Option<ExecutionStrategy<B>> {
    (devices.len() > 1)
        .then(|| ExecutionStrategy::multi(devices.to_vec(), MultiDeviceOptim::OptimMainDevice))
}

fn run<B>(
    backend: &str,
    devices: Vec<B::Device>,
    strategy: impl Fn(&[B::Device]) -> Option<ExecutionStrategy<B>>,
) where
    B: AutodiffBackend + FusedHeadBackend,
    B::InnerBackend: FusedHeadBackend,
{
    let device = devices[0].clone();
    let digits = load_digits(SEED);
    println!(
        "UCI digits: {} train, {} test; MLP 64 -> 64 -> 10; Adam lr {LEARNING_RATE}, batch {BATCH}, {EPOCHS} epochs; burn-train's Learner; {backend}, {} device(s)",
        digits.train_y.len(),
        digits.test_y.len(),
        devices.len()
    );
    // Both models from the same initial weights (`train_digits`' `Mlp`).
    let start = Mlp::<B>::new(&device, 64, SEED);
    let fused = FusedModel {
        hidden: start.hidden.clone(),
        head: start.fused,
    };
    let stock = StockModel {
        hidden: start.hidden,
        head: start.stock,
    };
    let root = std::env::temp_dir().join("burn_fused_head_learner");
    let fused = fit!(fused, &digits, root.join("fused"), strategy(&devices));
    let stock = fit!(stock, &digits, root.join("stock"), strategy(&devices));

    let test = || {
        let items = split(&digits.test_x, &digits.test_y, digits.features);
        Batcher::<B::InnerBackend, Digit, _>::batch(&DigitBatcher, items, &device)
    };
    println!(
        "summary: test accuracy after {EPOCHS} epochs: fused head {:.2}%, stock head {:.2}%; checkpoints and logs in {}",
        100.0 * accuracy(fused.classify(test())),
        100.0 * accuracy(stock.classify(test())),
        root.display()
    );
}

/// The number after `--devices` (1 without).
fn device_count() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == "--devices").map_or(1, |at| {
        let n = args.get(at + 1).and_then(|n| n.parse().ok());
        n.expect("--devices N: a number of devices after --devices")
    })
}

fn main() {
    let n = device_count();
    #[cfg(not(feature = "ddp"))]
    assert!(
        !std::env::args().any(|a| a == "--ddp"),
        "--ddp needs the `ddp` feature: cargo run --release --example learner_digits --features ddp -- --devices N --ddp"
    );
    #[cfg(feature = "ddp")]
    if std::env::args().any(|a| a == "--ddp") {
        use burn::tensor::backend::distributed::{DistributedConfig, ReduceOperation};
        type B = burn::backend::Autodiff<burn::backend::Cuda>;
        let ddp = |devices: &[burn::backend::cuda::CudaDevice]| {
            let config = DistributedConfig {
                all_reduce_op: ReduceOperation::Mean,
            };
            Some(ExecutionStrategy::<B>::ddp(devices.to_vec(), config))
        };
        let devices = (0..n).map(burn::backend::cuda::CudaDevice::new).collect();
        run::<B>("Cuda (CUDA kernels), DDP", devices, ddp);
        return;
    }
    #[cfg(feature = "cuda")]
    run::<burn::backend::Autodiff<burn::backend::Cuda>>(
        "Cuda (CUDA kernels)",
        (0..n).map(burn::backend::cuda::CudaDevice::new).collect(),
        multi,
    );
    #[cfg(all(feature = "wgpu", not(feature = "cuda")))]
    run::<burn::backend::Autodiff<burn::backend::Vulkan>>(
        "Vulkan (wgpu kernels)",
        vec![Default::default(); n],
        multi,
    );
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    run::<burn::backend::Autodiff<burn::backend::NdArray>>(
        "NdArray",
        vec![Default::default(); n],
        multi,
    );
}
