//! Data parallelism as Burn's DDP computes it: N peers (one thread each, as Burn's own
//! collective tests run them), each with the same model and its own equal shard of the batch,
//! all-reduce their gradients with Burn's collective (`ReduceOperation::Mean`, what
//! `ExecutionStrategy::ddp` uses by default) and step their own optimizers. The gradients
//! after one step must equal one device's on the whole batch (under the gates), every
//! peer must hold the same bits, and after a few SGD steps the weights and the loss must match
//! single-device training. Burn's DDP itself needs NCCL (CUDA, two GPUs or more); this runs the
//! same algebra on any backend. Each test is written once, in `data_parallel/cases.rs`, and
//! runs on every backend of the build (`on_backend!` at the bottom).

mod common;

use std::sync::Mutex;
use std::sync::mpsc::channel;

use burn::backend::Autodiff;
use burn::collective::{
    CollectiveConfig, PeerId, ReduceOperation, finish_collective, register, reset_collective,
};
use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor};
use burn_fused_head::{FusedHeadBackend, FusedLinearCrossEntropy, HeadActivation, HeadOptions};
use burn_fused_head_testing::reference::{HeadData, seeded_uniform};
use common::{assert_gates, to_f64};

use burn_fused_head_testing::gates::gate;

/// The collective's state is global per backend type: one test at a time.
static COLLECTIVE: Mutex<()> = Mutex::new(());

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    hidden: Linear<B>,
    head: FusedLinearCrossEntropy<B>,
}

impl<B: FusedHeadBackend> Mlp<B> {
    /// Weights from a fixed seed: the same on every peer.
    fn new(device: &B::Device, classes: usize) -> Self {
        let param = |seed, shape: [usize; 2], bound| {
            Param::from_tensor(seeded_uniform(seed, shape, bound, device))
        };
        let vector = |seed, n, bound| Param::from_tensor(seeded_uniform(seed, [n], bound, device));
        Self {
            hidden: Linear {
                weight: param(1, [8, 16], 0.35),
                bias: Some(vector(2, 16, 0.35)),
            },
            head: FusedLinearCrossEntropy {
                weight: param(3, [classes, 16], 0.25),
                bias: Some(vector(4, classes, 0.25)),
                options: HeadOptions::new().with_activation(HeadActivation::Relu),
            },
        }
    }

    fn loss(&self, x: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let hidden = burn::tensor::activation::relu(self.hidden.forward(x)); // [B, 16]
        self.head.forward_loss(hidden, labels) // [1]
    }
}

/// The parameters' values (or gradients), in a fixed order: hidden W, hidden b, head W, head b.
type Values = Vec<Vec<f64>>;

/// The gradients of `model` in `grads`, on the inner backend `B`.
fn gradients<B: FusedHeadBackend>(model: &Mlp<Autodiff<B>>, grads: &GradientsParams) -> Values {
    let hidden_b = model.hidden.bias.as_ref().expect("a bias");
    vec![
        to_f64(
            grads
                .get::<B, 2>(model.hidden.weight.id)
                .expect("dW hidden"),
        ),
        to_f64(grads.get::<B, 1>(hidden_b.id).expect("db hidden")),
        to_f64(grads.get::<B, 2>(model.head.weight.id).expect("dW head")),
        to_f64(
            grads
                .get::<B, 1>(model.head.bias.as_ref().expect("b").id)
                .expect("db head"),
        ),
    ]
}

/// The parameters of `model`, in [`gradients`]'s order.
fn parameters<B: FusedHeadBackend>(model: &Mlp<Autodiff<B>>) -> Values {
    vec![
        to_f64(model.hidden.weight.val()),
        to_f64(model.hidden.bias.as_ref().expect("a bias").val()),
        to_f64(model.head.weight.val()),
        to_f64(model.head.bias.as_ref().expect("b").val()),
    ]
}

/// What one run reports: the first step's gradients, each step's loss, the final parameters.
#[derive(Debug, Clone)]
struct Run {
    first_gradients: Values,
    losses: Vec<f64>,
    parameters: Values,
}

/// `steps` SGD steps of `model` on `data` (rows `rows`), on one device; with `peer`, as peer
/// `id` of `n`, its gradients all-reduced (the mean) with the other peers' before each step.
/// Every peer takes a clone of one model, as DDP's workers do: the all-reduce pairs the
/// parameters by their ids.
fn train<B: FusedHeadBackend>(
    device: &B::Device,
    mut model: Mlp<Autodiff<B>>,
    data: &HeadData,
    rows: std::ops::Range<usize>,
    steps: usize,
    peer: Option<(usize, usize)>,
) -> Run {
    type AB<B> = Autodiff<B>;
    if let Some((id, n)) = peer {
        let config = CollectiveConfig::default().with_num_devices(n);
        register::<B>(PeerId::from(id), device.clone(), config).expect("register the peer");
    }
    let (x, _, _, labels) = data.tensors::<AB<B>>(device, DType::F32);
    let n_rows = rows.len();
    let x = x.narrow(0, rows.start, n_rows);
    let labels = labels.narrow(0, rows.start, n_rows);
    let mut optim = SgdConfig::new().init();
    let mut run = Run {
        first_gradients: Vec::new(),
        losses: Vec::new(),
        parameters: Vec::new(),
    };
    for step in 0..steps {
        let loss = model.loss(x.clone(), labels.clone());
        run.losses.push(to_f64(loss.clone())[0]);
        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
        if let Some((id, _)) = peer {
            grads = grads
                .all_reduce::<B>(PeerId::from(id), ReduceOperation::Mean)
                .expect("all-reduce the gradients");
        }
        if step == 0 {
            run.first_gradients = gradients::<B>(&model, &grads);
        }
        model = optim.step(0.2, model, grads);
    }
    run.parameters = parameters::<B>(&model);
    if let Some((id, _)) = peer {
        finish_collective::<B>(PeerId::from(id)).expect("finish the collective");
    }
    run
}

/// `n` peers on equal shards of `data`, one thread each, against one device on the whole batch.
fn check<B: FusedHeadBackend>(device: &B::Device, data: &HeadData, n: usize, steps: usize) {
    let _guard = COLLECTIVE.lock().unwrap_or_else(|p| p.into_inner());
    reset_collective::<B>();
    let model = Mlp::<Autodiff<B>>::new(device, data.classes);
    let single = train::<B>(device, model.clone(), data, 0..data.batch, steps, None);
    let shard = data.batch / n;
    let (send, recv) = channel();
    let threads: Vec<_> = (0..n)
        .map(|id| {
            let (device, data, send) = (device.clone(), data.clone(), send.clone());
            let model = model.clone();
            std::thread::spawn(move || {
                let rows = id * shard..(id + 1) * shard;
                let run = train::<B>(&device, model, &data, rows, steps, Some((id, n)));
                send.send((id, run)).expect("send the run");
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a peer panicked");
    }
    let mut runs: Vec<(usize, Run)> = recv.try_iter().collect();
    runs.sort_by_key(|(id, _)| *id);
    assert_eq!(runs.len(), n, "every peer reports");
    let context = format!("{n} peers, B = {}, C = {}", data.batch, data.classes);
    let names = ["hidden dW", "hidden db", "head dW", "head db"];
    for (id, run) in &runs {
        assert_eq!(
            run.first_gradients, runs[0].1.first_gradients,
            "{context}: peer {id}'s all-reduced gradients differ from peer 0's"
        );
        let gates: Vec<_> = names
            .iter()
            .zip(run.first_gradients.iter().zip(&single.first_gradients))
            .map(|(name, (got, want))| gate(name, got, want))
            .collect();
        assert_gates(&format!("{context}, peer {id}, first step"), &gates);
        let gates: Vec<_> = names
            .iter()
            .zip(run.parameters.iter().zip(&single.parameters))
            .map(|(name, (got, want))| gate(&name.replace(" d", " "), got, want))
            .collect();
        assert_gates(
            &format!("{context}, peer {id}, after {steps} steps"),
            &gates,
        );
    }
    // The loss curve: the mean of the peers' losses is the whole batch's mean loss.
    for step in 0..steps {
        let mean = runs.iter().map(|(_, r)| r.losses[step]).sum::<f64>() / n as f64;
        assert_gates(
            &format!("{context}, loss at step {step}"),
            &[gate("loss", &[mean], &[single.losses[step]])],
        );
    }
}

/// The tests of `data_parallel/cases.rs`, each written once there, on one backend `B`.
macro_rules! on_backend {
    ($name:ident, $backend:ty, $device:expr) => {
        mod $name {
            use super::*;

            type B = $backend;

            fn device() -> burn::tensor::Device<B> {
                $device
            }

            include!("data_parallel/cases.rs");
        }
    };
}

on_backend!(
    ndarray,
    burn::backend::NdArray<f32>,
    burn::backend::ndarray::NdArrayDevice::Cpu
);
#[cfg(feature = "wgpu")]
on_backend!(wgpu_fusion, burn::backend::Vulkan, common::vulkan_device());
#[cfg(feature = "cuda")]
on_backend!(
    cuda_fusion,
    burn::backend::Cuda,
    burn::backend::cuda::CudaDevice::default()
);
