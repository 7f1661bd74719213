//! The README's example, compiled by `cargo test` and checked against the README's text by
//! `tests/readme.rs`: a model whose last layer is the fused head, trained a few steps with Adam.
//!
//!   cargo run --release --example readme                  # NdArray (CPU)
//!   cargo run --release --example readme --features cuda  # the CUDA kernels

// README: begin
use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Int, Tensor};
use burn_fused_head::{FusedHead, FusedHeadBackend, FusedHeadConfig, HeadLoss, HeadPrecision};

#[derive(Module, Debug)]
struct Model<B: Backend> {
    hidden: Linear<B>,
    head: FusedHead<B>, // weight [C, I], bias [C]
}

impl<B: FusedHeadBackend> Model<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            hidden: LinearConfig::new(784, 256).init(device),
            // I = 256 inputs, C = 10 classes; Tf32 allows tensor cores for C > 32 on CUDA.
            head: FusedHeadConfig::new(256, 10)
                .with_precision(HeadPrecision::Exact)
                .init(device),
        }
    }

    /// The cross-entropy under `options` (`HeadLoss::new()`: the mean), `[1]`:
    /// `loss.backward()` reaches X, W and b.
    fn loss(&self, x: Tensor<B, 2>, labels: Tensor<B, 1, Int>, options: &HeadLoss) -> Tensor<B, 1> {
        let h = Relu::new().forward(self.hidden.forward(x)); // [B, 256]
        self.head.forward_loss(h, labels, options)
    }

    /// The predicted class of each row, `[B]`.
    fn predict(&self, x: Tensor<B, 2>) -> Tensor<B, 1, Int> {
        let h = Relu::new().forward(self.hidden.forward(x));
        self.head.logits(h).argmax(1).squeeze_dim(1) // H = ReLU(X W^T + b), [B, C]
    }
}

fn train<B: AutodiffBackend + FusedHeadBackend>(device: &B::Device) {
    let mut model = Model::<B>::new(device);
    let mut optim = AdamConfig::new().init();
    let x = Tensor::<B, 2>::random([64, 784], Distribution::Normal(0.0, 1.0), device);
    let labels = Tensor::<B, 1, Int>::arange(0..64, device).remainder_scalar(10);
    // Burn's and PyTorch's options: here rows labelled -100 (padding) count for nothing.
    let labels = labels.clone().mask_fill(labels.equal_elem(9), -100);
    let options = HeadLoss::new().with_ignore_index(Some(-100));
    for step in 0..5 {
        let loss = model.loss(x.clone(), labels.clone(), &options);
        println!("step {step}: loss {}", loss.clone().into_scalar());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model, grads);
    }
    println!("predicted: {}", model.predict(x).narrow(0, 0, 8));
}
// README: end

fn main() {
    #[cfg(feature = "cuda")]
    train::<burn::backend::Autodiff<burn::backend::Cuda>>(&Default::default());
    #[cfg(not(feature = "cuda"))]
    train::<burn::backend::Autodiff<burn::backend::NdArray>>(&Default::default());
}
