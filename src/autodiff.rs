//! `Autodiff<B, C>`: B's fused forward, and one backward step running B's fused backward
//! (stages 3 to 6).

use burn::backend::Autodiff;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::ops::{FloatTensor, IntTensor};

use crate::backend::{FusedHeadBackend, HeadLimits, HeadPrecision, HeadWanted};

/// Only the loss is overridden: the stages keep their stock-op bodies on `Autodiff`, which
/// autodiff differentiates as usual, so calling a stage on tracked tensors stays correct.
impl<B: FusedHeadBackend, C: CheckpointStrategy> FusedHeadBackend for Autodiff<B, C> {
    fn head_limits() -> HeadLimits {
        B::head_limits()
    }

    fn head_tf32_available(device: &Self::Device) -> bool {
        B::head_tf32_available(device)
    }

    fn linear_relu_cross_entropy(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        labels: IntTensor<Self>,
        precision: HeadPrecision,
    ) -> FloatTensor<Self> {
        /// The backward step, in the forward pass's precision.
        #[derive(Debug)]
        struct HeadBackward(HeadPrecision);

        impl<B: FusedHeadBackend> Backward<B, 3> for HeadBackward {
            /// X (dW needs it) and W (dX needs it) as checkpointed parents, then Z (the ReLU
            /// mask) and dH (for a unit upstream gradient), both `[B, C]`, from the forward pass.
            type State = (NodeId, NodeId, FloatTensor<B>, FloatTensor<B>);

            fn backward(
                self,
                ops: Ops<Self::State, 3>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let [node_x, node_weight, node_bias] = ops.parents;
                // The upstream gradient of the loss, [1]: 1 for a plain `loss.backward()`, any
                // other value when the loss was scaled or added to other losses.
                let grad_loss = grads.consume::<B>(&ops.node);
                let (x_id, weight_id, z, dh) = ops.state;
                let x: FloatTensor<B> = checkpointer.retrieve_node_output(x_id); // [B, I]
                let weight: FloatTensor<B> = checkpointer.retrieve_node_output(weight_id); // [C, I]

                let wanted = HeadWanted {
                    x: node_x.is_some(),
                    weight: node_weight.is_some(),
                    bias: node_bias.is_some(),
                };
                let out = B::head_backward(x, weight, z, dh, grad_loss, wanted, self.0);
                for (node, grad) in [
                    (node_x, out.x),
                    (node_weight, out.weight),
                    (node_bias, out.bias),
                ] {
                    if let (Some(node), Some(grad)) = (node, grad) {
                        grads.register::<B>(node.id, grad);
                    }
                }
            }
        }

        // Compute bound: keep Z and dH from the forward pass rather than recompute the GEMM
        // under a checkpointing strategy. Labels are integers: not a parent, never differentiated.
        match HeadBackward(precision)
            .prepare::<C>([x.node.clone(), weight.node.clone(), bias.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let x_id = prep.checkpoint(&x);
                let weight_id = prep.checkpoint(&weight);
                let fwd = B::head_forward(
                    x.primitive,
                    weight.primitive,
                    bias.primitive,
                    labels,
                    precision,
                );
                prep.finish((x_id, weight_id, fwd.z, fwd.dh), fwd.loss)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::linear_relu_cross_entropy(
                x.primitive,
                weight.primitive,
                bias.primitive,
                labels,
                precision,
            )),
        }
    }
}
