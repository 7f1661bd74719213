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
use burn_fused_head::{FusedHeadBackend, FusedLinearCrossEntropy, FusedLinearCrossEntropyConfig};

#[derive(Module, Debug)]
struct Model<B: Backend> {
    hidden: Linear<B>,
    head: FusedLinearCrossEntropy<B>, // in place of `Linear` + `CrossEntropyLoss`
}

impl<B: FusedHeadBackend> Model<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            hidden: LinearConfig::new(784, 256).init(device),
            head: FusedLinearCrossEntropyConfig::new(256, 10) // I = 256, C = 10
                .with_ignore_index(Some(-100)) // rows labelled -100 count for nothing
                .init(device),
        }
    }

    /// The loss `[1]`: `loss.backward()` reaches the head's W and b and the hidden layer.
    fn loss(&self, x: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let h = Relu::new().forward(self.hidden.forward(x)); // [B, 256]
        self.head.forward_loss(h, targets)
    }

    /// The predicted class of each row `[B]`, from the logits `[B, C]` (`Linear::forward`'s).
    fn predict(&self, x: Tensor<B, 2>) -> Tensor<B, 1, Int> {
        let h = Relu::new().forward(self.hidden.forward(x));
        self.head.forward(h).argmax(1).squeeze_dim(1)
    }
}

fn train<B: AutodiffBackend + FusedHeadBackend>(device: &B::Device) {
    let mut model = Model::<B>::new(device);
    let mut optim = AdamConfig::new().init();
    let x = Tensor::<B, 2>::random([64, 784], Distribution::Normal(0.0, 1.0), device);
    let targets = Tensor::<B, 1, Int>::arange(0..64, device).remainder_scalar(10);
    let targets = targets.clone().mask_fill(targets.equal_elem(9), -100); // padding
    for step in 0..5 {
        let loss = model.loss(x.clone(), targets.clone());
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
