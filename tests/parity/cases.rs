/// Stage-by-stage gates for every shape, unit upstream gradient.
#[test]
fn stages_pass_the_gates_over_the_shape_sweep() {
    let device = &device();
    for (k, &(b, i, c)) in SHAPES.iter().enumerate() {
        let data = HeadData::random(k as u64, b, i, c);
        check_stages::<B>(device, &data, 1.0, &format!("B={b} I={i} C={c}"));
    }
}

/// The fast path (head_forward + head_backward) against the f64 reference stages, and against
/// the same backend's stage-by-stage kernels; also with a non-unit upstream gradient.
#[test]
fn fast_path_matches_the_reference_and_the_stages() {
    let device = &device();
    for (k, &(b, i, c)) in FAST_SHAPES.iter().enumerate() {
        let data = HeadData::random(200 + k as u64, b, i, c);
        let grad = if k % 2 == 0 { 1.0 } else { -1.5 };
        let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
        let fast = run_fast_path(
            x.clone(),
            w.clone(),
            bias.clone(),
            labels.clone(),
            grad,
            opts(HeadPrecision::Exact).kernels(),
        );
        let context = format!("fast path B={b} I={i} C={c} g={grad}");
        assert_gates(&context, &fast.gates(&reference_stages(&data, grad)));
        let stages = run_stages(x, w, bias, labels, grad);
        assert_gates(
            &format!("{context}, against the stages"),
            &fast.gates(&stages),
        );
    }
}

/// `HeadPrecision::Tf32` on the fast path. Where the backend has TF32 tensor cores: the
/// gates against the TF32 reference, and Z outside the exact gates somewhere (the tensor cores
/// did run). Elsewhere: the same bits as `HeadPrecision::Exact`.
#[test]
fn tf32_fast_path_matches_the_rounded_reference() {
    let device = &device();
    let tensor_cores = B::head_tf32_available(device);
    for (k, &(b, i, c)) in TF32_SHAPES.iter().enumerate() {
        let data = HeadData::random(500 + k as u64, b, i, c);
        let grad = if k % 2 == 0 { 1.0 } else { -1.5 };
        let run = |precision| {
            let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
            run_fast_path(x, w, bias, labels, grad, opts(precision).kernels())
        };
        let tf32 = run(HeadPrecision::Tf32);
        let exact = run(HeadPrecision::Exact);
        let context = format!("TF32 fast path B={b} I={i} C={c} g={grad}");
        if tensor_cores {
            assert_gates(&context, &tf32.gates(&tf32_reference_stages(&data, grad)));
            assert_tensor_cores_ran(&context, "Z", &tf32.z, &exact.z);
        } else {
            assert_eq!(
                tf32, exact,
                "{context}: without tensor cores TF32 must run exact"
            );
        }
    }
}

/// `HeadPrecision::Tf32` through autodiff (the public function, the large-C streamed path):
/// where the backend has TF32 tensor cores, loss and gradients against the exact reference
/// under the TF32 gate (`gates::tf32_slack`), and dW outside the exact gates somewhere (the
/// tensor cores did run); elsewhere, equal to the exact op's.
#[test]
fn tf32_autodiff_passes_the_tf32_gate() {
    type B = burn::backend::Autodiff<self::B>;
    let device = &device();
    let data = HeadData::random(77, 130, 72, 129);
    let scale = 2.0;
    let run = |precision| {
        let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
        head_grads(x, w, b, labels, scale, |x, w, b, l| {
            fused_linear_cross_entropy(x, w, Some(b), l, &opts(precision))
        })
    };
    let got = run(HeadPrecision::Tf32);
    let exact = run(HeadPrecision::Exact);
    if B::head_tf32_available(device) {
        assert_tf32_grads("TF32 autodiff", &got, &data, scale);
        assert_tensor_cores_ran("TF32 autodiff", "dW", &got.dw, &exact.dw);
        // Which rounding rule the products followed, for the record: the gate against
        // a reference with each rule (the TF32 gate above is the assertion).
        let (x, w, b, labels) = data.tensors::<Reference>(&reference_device(), DType::F64);
        let truncated =
            burn_fused_head_testing::gates::run_stages_tf32_truncated(x, w, b, labels, scale);
        for (rule, want) in [
            ("to nearest", tf32_reference_stages(&data, scale)),
            ("toward zero", truncated),
        ] {
            let reports = [
                gate("dX", &got.dx, &want.dx),
                gate("dW", &got.dw, &want.dw),
                gate("db", &got.db, &want.db),
            ];
            let verdicts: Vec<String> = reports.iter().map(|r| r.to_string()).collect();
            eprintln!("TF32 autodiff against operands rounded {rule}: {verdicts:?}");
        }
    } else {
        assert_eq!(
            (got.loss, &got.dx, &got.dw, &got.db),
            (exact.loss, &exact.dx, &exact.dw, &exact.db),
            "without tensor cores TF32 must run exact"
        );
    }
}

/// The module's `forward` (the logits) on the inner backend, which runs the op's forward kernels
/// (the small-C logits kernel up to C = 32, the tiled product above): H against the reference's
/// H under the gate, for the fast path's shapes; with `HeadPrecision::Tf32`, against the
/// TF32 reference where the backend has TF32 tensor cores (and outside the exact gates
/// somewhere), else the exact logits' bits; and equal, bit for bit, to ReLU of the training
/// forward's Z in the same precision.
#[test]
fn logits_match_the_reference_and_the_training_forward() {
    let device = &device();
    let h_gate = |context: &str, got: Vec<f64>, want: &[f64]| {
        assert_gates(
            context,
            &[burn_fused_head_testing::gates::gate("H", &got, want)],
        );
    };
    let h_of = |data: &HeadData, precision| {
        let (x, w, bias, _) = data.tensors::<B>(device, DType::F32);
        burn_fused_head_testing::gates::values(logits(x, w, bias, opts(precision)))
    };
    for (k, &(b, i, c)) in FAST_SHAPES.iter().enumerate() {
        let data = HeadData::random(600 + k as u64, b, i, c);
        let (x, w, bias, _) = data.tensors::<B>(device, DType::F32);
        let got = burn_fused_head_testing::gates::values(logits(x, w, bias, relu_options()));
        let context = format!("logits B={b} I={i} C={c}");
        h_gate(&context, got, &reference_stages(&data, 1.0).h);
    }
    for (k, &(b, i, c)) in TF32_SHAPES.iter().enumerate() {
        let data = HeadData::random(700 + k as u64, b, i, c);
        let tf32 = h_of(&data, HeadPrecision::Tf32);
        let exact = h_of(&data, HeadPrecision::Exact);
        let context = format!("TF32 logits B={b} I={i} C={c}");
        // The training forward's Z in the same precision: ReLU of it is the logits, bit for bit
        // (the logits' bias and ReLU run in place of the product, the training's keep Z).
        let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
        let fwd = B::head_forward(
            x.into_primitive().tensor(),
            w.into_primitive().tensor(),
            bias.into_primitive().tensor(),
            labels.into_primitive(),
            opts(HeadPrecision::Tf32).kernels(),
        );
        let z = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(fwd.z));
        let relu_z = burn_fused_head_testing::gates::values(burn::tensor::activation::relu(z));
        assert_eq!(
            tf32, relu_z,
            "{context}: logits against ReLU(Z) of the forward"
        );
        if B::head_tf32_available(device) {
            h_gate(&context, tf32.clone(), &tf32_reference_stages(&data, 1.0).h);
            assert_tensor_cores_ran(&context, "H", &tf32, &exact);
        } else {
            assert_eq!(
                tf32, exact,
                "{context}: without tensor cores TF32 must run exact"
            );
        }
    }
}

/// The fast backward produces exactly the wanted gradients, each equal to the full run's.
#[test]
fn backward_computes_exactly_the_wanted_gradients() {
    let device = &device();
    for &(b, i, c) in &[(40, 30, 10), (40, 30, 50)] {
        let data = HeadData::random(300 + c as u64, b, i, c);
        let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
        let (x, w) = (x.into_primitive().tensor(), w.into_primitive().tensor());
        let fwd = B::head_forward(
            x.clone(),
            w.clone(),
            bias.into_primitive().tensor(),
            labels.into_primitive(),
            opts(HeadPrecision::Exact).kernels(),
        );
        let g = Tensor::<B, 1>::from_data([1.0], (device, DType::F32));
        let run = |wanted: HeadWanted| {
            let out = B::head_backward(
                x.clone(),
                w.clone(),
                fwd.z.clone(),
                fwd.dh.clone(),
                g.clone().into_primitive().tensor(),
                wanted,
                opts(HeadPrecision::Exact).kernels(),
            );
            let read = |t: Option<_>| {
                t.map(|t| {
                    to_f64(Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(t)).reshape([-1]))
                })
            };
            let read1 = |t: Option<_>| {
                t.map(|t| to_f64(Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t))))
            };
            (read(out.x), read(out.weight), read1(out.bias))
        };
        let all = run(HeadWanted {
            x: true,
            weight: true,
            bias: true,
        });
        for (wx, ww, wb) in [
            (true, false, false),
            (false, true, false),
            (false, false, true),
            (false, true, true),
        ] {
            let got = run(HeadWanted {
                x: wx,
                weight: ww,
                bias: wb,
            });
            assert_eq!(got.0.is_some(), wx, "C={c}: dX produced unless wanted");
            assert_eq!(got.1.is_some(), ww, "C={c}: dW produced unless wanted");
            assert_eq!(got.2.is_some(), wb, "C={c}: db produced unless wanted");
            if wx {
                assert_eq!(got.0, all.0, "C={c}: dX alone");
            }
            if ww {
                assert_eq!(got.1, all.1, "C={c}: dW alone");
            }
            if wb {
                assert_eq!(got.2, all.2, "C={c}: db alone");
            }
        }
    }
}

/// The op through autodiff against Burn's stock autodiff, for every shape.
#[test]
fn autodiff_matches_stock_burn() {
    type B = burn::backend::Autodiff<self::B>;
    let device = &device();
    for (k, &(b, i, c)) in SHAPES.iter().enumerate() {
        let data = HeadData::random(100 + k as u64, b, i, c);
        check_autodiff::<B>(device, &data, 1.0, &format!("autodiff B={b} I={i} C={c}"));
    }
}

/// The small-C backward's chunks longer than its shared stage of dZ (128 rows; from B = 65537
/// on): B = 65601 gives chunks of 129 rows, a second stage of one row and a ragged last chunk of
/// 69. Against the f64 reference only: the stage-by-stage `weight_gradient` sums the batch in
/// one loop per unit, and lavapipe (the CPU Vulkan driver of CI) silently ends a shader
/// invocation's loops after 65535 iterations in all (llvmpipe's `LP_MAX_TGSI_LOOP_ITERATIONS`),
/// so on lavapipe the stages' dW is wrong at this B.
#[test]
fn backward_chunks_longer_than_one_stage_pass_the_gates() {
    let device = &device();
    for (k, &(b, i, c)) in [(65601, 3, 5), (65601, 2, 20)].iter().enumerate() {
        let data = HeadData::random(300 + k as u64, b, i, c);
        let grad = if k % 2 == 0 { 1.0 } else { -1.5 };
        let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
        let fast = run_fast_path(
            x,
            w,
            bias,
            labels,
            grad,
            opts(HeadPrecision::Exact).kernels(),
        );
        let context = format!("fast path B={b} I={i} C={c} g={grad}");
        assert_gates(&context, &fast.gates(&reference_stages(&data, grad)));
    }
}

/// A scaled loss, and a loss added to another loss: gradients follow the upstream gradient.
#[test]
fn gradients_follow_the_upstream_gradient() {
    let device = &device();
    let data = HeadData::random(7, 33, 20, 9);
    check_stages::<B>(device, &data, 2.5, "stages, g = 2.5");
    check_autodiff::<Autodiff<B>>(device, &data, -0.75, "autodiff, loss * -0.75");

    // loss + 3 * loss: the op is used twice and the upstream gradients add (1 and 3).
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
    type A<B> = Autodiff<B>;
    let twice =
        |x: Tensor<A<B>, 2>, w: Tensor<A<B>, 2>, b: Tensor<A<B>, 1>, l: Tensor<A<B>, 1, Int>| {
            fused_linear_cross_entropy(
                x.clone(),
                w.clone(),
                Some(b.clone()),
                l.clone(),
                &relu_options(),
            ) + fused_linear_cross_entropy(x, w, Some(b), l, &relu_options()) * 3.0
        };
    let got = head_grads(x, w, b, labels, 1.0, twice);
    let mut want = stock_grads(&data, 4.0);
    want.loss *= 4.0;
    assert_grads("loss + 3 * loss", &got, &want);
}

/// Rows whose every pre-activation is <= 0: H is zero, the loss is ln(C), dZ is zero.
#[test]
fn dead_relu_rows_pass_the_gates() {
    let device = &device();
    let mut data = HeadData::random(11, 24, 16, 6);
    for v in &mut data.bias {
        *v = -0.5 - v.abs();
    }
    for r in 0..data.batch / 2 {
        data.x[r * data.inputs..(r + 1) * data.inputs].fill(0.0);
    }
    let got = check_stages::<B>(device, &data, 1.0, "dead rows");
    let ln_c = (data.classes as f64).ln();
    for r in 0..data.batch / 2 {
        assert!(
            burn_fused_head_testing::gates::within(got.loss_rows[r], ln_c),
            "row {r}: loss {} != ln C",
            got.loss_rows[r]
        );
        assert!(
            got.dz[r * data.classes..(r + 1) * data.classes]
                .iter()
                .all(|v| *v == 0.0)
        );
    }
    check_autodiff::<Autodiff<B>>(device, &data, 1.0, "dead rows, autodiff");
}

/// Logits near 1e4: a naive exp overflows; the stable one keeps the loss finite and exact.
/// X and W are small integers, so Z is exact in f32 and the test isolates the softmax.
#[test]
fn logits_near_1e4_pass_the_gates() {
    let device = &device();
    let mut data = HeadData::random(13, 19, 8, 7);
    for v in &mut data.x {
        *v = (*v * 4.0).round();
    }
    for v in &mut data.weight {
        *v = (*v * 1000.0).round() * 2.0;
    }
    for v in &mut data.bias {
        *v = (*v * 1000.0).round();
    }
    let got = check_stages::<B>(device, &data, 1.0, "logits near 1e4");
    let max_h = got.h.iter().cloned().fold(0.0, f64::max);
    assert!(
        max_h > 5e3,
        "the test must reach large logits, max H = {max_h}"
    );
    assert!(got.loss.is_finite() && got.loss_rows.iter().all(|l| l.is_finite()));
    check_autodiff::<Autodiff<B>>(device, &data, 1.0, "logits near 1e4, autodiff");
}

/// Rows where the label's probability is near 1 (llm.c's and CCE's peaked inputs).
#[test]
fn confident_rows_pass_the_gates() {
    let device = &device();
    let mut data = HeadData::random(17, 40, 12, 9);
    for v in &mut data.weight {
        *v *= 25.0;
    }
    // label = argmax of H, computed on the host in f64.
    for r in 0..data.batch {
        let h = |c: usize| {
            let z: f64 = (0..data.inputs)
                .map(|k| {
                    data.x[r * data.inputs + k] as f64 * data.weight[c * data.inputs + k] as f64
                })
                .sum::<f64>()
                + data.bias[c] as f64;
            z.max(0.0)
        };
        data.labels[r] = (0..data.classes)
            .max_by(|a, b| h(*a).total_cmp(&h(*b)))
            .unwrap() as i64;
    }
    let got = check_stages::<B>(device, &data, 1.0, "confident rows");
    assert!(
        got.loss < 0.5,
        "rows should be confident, mean loss {}",
        got.loss
    );
    assert!(
        got.loss_rows.iter().all(|l| *l >= 0.0),
        "a loss went negative: {:?}",
        got.loss_rows
    );
    check_autodiff::<Autodiff<B>>(device, &data, 1.0, "confident rows, autodiff");
}

/// X and W given as transposed views (non-contiguous).
#[test]
fn transposed_views_match_stock_burn() {
    let device = &device();
    let data = HeadData::random(19, 21, 10, 6);
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
    let transposed_view = |t: Tensor<Autodiff<B>, 2>| {
        let stored =
            Tensor::<Autodiff<B>, 2>::from_data(t.transpose().into_data(), (device, DType::F32)); // [n, m]
        stored.transpose() // [m, n], strides (1, m)
    };
    let (x, w) = (transposed_view(x), transposed_view(w));
    let got = head_grads(x, w, b, labels, 1.0, relu_loss);
    assert_grads("non-contiguous X and W", &got, &stock_grads(&data, 1.0));
}

/// A stock `Linear` before the head: the gradient reaches the Linear's parameters.
#[test]
fn gradients_reach_a_stock_linear_before_the_head() {
    let device = &device();
    let first = HeadData::random(23, 16, 12, 10); // X0 [B, I0] and W0 as [I, I0]: I = 10
    let head = HeadData::random(29, 16, 10, 5);
    fn run<B: AutodiffBackend>(
        first: &HeadData,
        head: &HeadData,
        device: &B::Device,
        dtype: DType,
        loss_fn: impl Fn(Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 1>, Tensor<B, 1, Int>) -> Tensor<B, 1>,
    ) -> Vec<Vec<f64>> {
        let (x0, w0, b0, _) = first.tensors::<B>(device, dtype); // [B, I0], [I, I0], [I]
        let (_, w, b, labels) = head.tensors::<B>(device, dtype);
        let linear = Linear {
            weight: Param::from_tensor(w0.transpose()), // Burn's Linear stores [d_in, d_out]
            bias: Some(Param::from_tensor(b0)),
        };
        let x0 = x0.require_grad();
        let loss = loss_fn(linear.forward(x0.clone()), w, b, labels);
        let grads = loss.backward();
        vec![
            to_f64(linear.weight.val().grad(&grads).unwrap()),
            to_f64(linear.bias.as_ref().unwrap().val().grad(&grads).unwrap()),
            to_f64(x0.grad(&grads).unwrap()),
        ]
    }
    let got = run::<Autodiff<B>>(&first, &head, device, DType::F32, relu_loss);
    let want = run::<Autodiff<Reference>>(
        &first,
        &head,
        &reference_device(),
        DType::F64,
        stock_head_loss,
    );
    // These gradients come out of the stock Linear's own matmuls, not out of our kernels (whose
    // outputs every other test gates). On CUDA those matmuls use TF32 (10-bit mantissa, about
    // 1e-3 relative), so the bound adds twice the error of the whole stock model on the same
    // backend (FlashAttention's "no worse than k x the baseline"): on NdArray and wgpu that term
    // is ~1e-7 and the check is the gate.
    let stock = run::<Autodiff<B>>(&first, &head, device, DType::F32, stock_head_loss);
    let names = ["Linear W", "Linear b", "X0"];
    for (k, name) in names.iter().enumerate() {
        let baseline = stock[k]
            .iter()
            .zip(&want[k])
            .map(|(s, w)| (s - w).abs())
            .fold(0.0, f64::max);
        for (i, (g, w)) in got[k].iter().zip(&want[k]).enumerate() {
            let bound = 2e-5 + 2e-4 * w.abs() + 2.0 * baseline;
            assert!(
                (g - w).abs() <= bound,
                "{name}[{i}]: got {g:e}, want {w:e}, |diff| {:e} > {bound:e} (stock's max error {baseline:e})",
                (g - w).abs()
            );
        }
    }
    assert!(
        got[0].iter().any(|v| *v != 0.0),
        "no gradient reached the Linear layer"
    );
}

/// Under a gradient-checkpointing strategy the gradients are unchanged.
#[test]
fn balanced_checkpointing_keeps_the_gradients() {
    let device = &device();
    let data = HeadData::random(31, 18, 9, 7);
    check_autodiff::<Autodiff<B, BalancedCheckpointing>>(
        device,
        &data,
        1.0,
        "BalancedCheckpointing",
    );
}

/// The gates catch an indexing bug: a weight gradient that reads dZ as if stored transposed
/// (`dZ[c * B + r]`) fails the dW gate and only the dW gate.
#[test]
fn a_wrong_weight_gradient_fails_only_the_dw_gate() {
    let device = &device();
    let data = HeadData::random(37, 12, 5, 4);
    let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
    let mut got = run_stages(x.clone(), w, b, labels, 1.0);
    let dz = Tensor::<B, 2>::from_data(
        TensorData::new(got.dz.clone(), [data.batch, data.classes]),
        (device, DType::F32),
    );
    let wrong = dz.reshape([data.classes, data.batch]).matmul(x); // reads dZ[c * B + r]
    got.dw = to_f64(wrong);
    let reports = got.gates(&reference_stages(&data, 1.0));
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(failed, vec![GATE_NAMES[5]], "only dW may fail");
}

/// Same inputs, same device: the same bits, every call.
#[test]
fn stages_give_the_same_bits_every_call() {
    let device = &device();
    let data = HeadData::random(41, 300, 64, 257);
    let run = || {
        let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
        run_stages(x, w, b, labels, 1.0)
    };
    let first = run();
    for _ in 0..3 {
        assert_eq!(run(), first, "a repeated call gave different bits");
    }
}

/// `HeadActivation::Identity` (cross-entropy on `X W^T + b`) on the fast path, over its shapes
/// on both sides of C = 32: against the f64 reference stages with the identity (H = Z,
/// `dZ = dH g`), and Z equal, bit for bit, to the ReLU run's Z (the activation only changes
/// what follows the product).
#[test]
fn identity_fast_path_matches_the_reference() {
    let device = &device();
    for (k, &(b, i, c)) in FAST_SHAPES.iter().enumerate() {
        let data = HeadData::random(800 + k as u64, b, i, c);
        let grad = if k % 2 == 0 { 1.0 } else { -1.5 };
        let run = |options: HeadOptions| {
            let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
            run_fast_path(x, w, bias, labels, grad, opts(options).kernels())
        };
        let identity = run(HeadActivation::Identity.into());
        let context = format!("identity fast path B={b} I={i} C={c} g={grad}");
        let want = reference_stages_with(&data, grad, HeadActivation::Identity);
        assert_gates(&context, &identity.gates(&want));
        assert_eq!(identity.z, run(relu_options()).z, "{context}: Z");
    }
}

/// `HeadActivation::Identity` with `HeadPrecision::Tf32` on the fast path: where the backend
/// has TF32 tensor cores, the gates against the TF32 reference with the identity;
/// elsewhere, the bits of the exact identity run.
#[test]
fn identity_tf32_fast_path_matches_the_rounded_reference() {
    let device = &device();
    let identity = HeadOptions::new().with_activation(HeadActivation::Identity);
    for (k, &(b, i, c)) in TF32_SHAPES.iter().enumerate() {
        let data = HeadData::random(850 + k as u64, b, i, c);
        let grad = if k % 2 == 0 { 1.0 } else { -1.5 };
        let run = |precision| {
            let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
            let kernels = identity.clone().with_precision(precision).kernels();
            run_fast_path(x, w, bias, labels, grad, kernels)
        };
        let tf32 = run(HeadPrecision::Tf32);
        let context = format!("identity TF32 fast path B={b} I={i} C={c} g={grad}");
        if B::head_tf32_available(device) {
            let want = reference_stages_with(
                &data,
                grad,
                identity.clone().with_precision(HeadPrecision::Tf32),
            );
            assert_gates(&context, &tf32.gates(&want));
        } else {
            assert_eq!(
                tf32,
                run(HeadPrecision::Exact),
                "{context}: TF32 must run exact"
            );
        }
    }
}

/// `HeadActivation::Identity` through autodiff (C <= 32: forward then backward; above, on the
/// CubeCL backends, the streamed path) against Burn's stock autodiff of the logits and
/// `CrossEntropyLoss`, for every shape, and with a scaled loss.
#[test]
fn identity_autodiff_matches_stock_linear_cross_entropy() {
    type B = burn::backend::Autodiff<self::B>;
    let device = &device();
    for (k, &(b, i, c)) in SHAPES.iter().enumerate() {
        let data = HeadData::random(870 + k as u64, b, i, c);
        let scale = if k % 2 == 0 { 1.0 } else { -0.75 };
        let context = format!("identity autodiff B={b} I={i} C={c} scale={scale}");
        check_identity_autodiff::<B>(device, &data, scale, &context, 0);
    }
}

/// `linear_relu_logits_with(.., HeadActivation::Identity)` is `X W^T + b`: Z of the reference
/// under the gate, and the training forward's Z bit for bit, over the fast path's shapes.
#[test]
fn identity_logits_are_the_training_forwards_z() {
    let device = &device();
    for (k, &(b, i, c)) in FAST_SHAPES.iter().enumerate() {
        let data = HeadData::random(880 + k as u64, b, i, c);
        let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
        let got = burn_fused_head_testing::gates::values(logits(
            x.clone(),
            w.clone(),
            bias.clone(),
            opts(HeadActivation::Identity),
        ));
        let context = format!("identity logits B={b} I={i} C={c}");
        let want = reference_stages(&data, 1.0).z;
        assert_gates(
            &context,
            &[burn_fused_head_testing::gates::gate("Z", &got, &want)],
        );
        let fast = run_fast_path(
            x,
            w,
            bias,
            labels,
            1.0,
            opts(HeadActivation::Identity).kernels(),
        );
        assert_eq!(got, fast.z, "{context}: against the training forward's Z");
    }
}

/// `linear_relu_cross_entropy_and_predictions`, with both activations, on the inner backend and
/// through autodiff, over shapes on both sides of C = 32: the loss is the op's, bit for bit;
/// each prediction is the argmax of the f64 reference's H (up to f32 near ties); through
/// autodiff the gradients are the op's, bit for bit.
#[test]
fn predictions_are_the_argmax_of_h_beside_the_same_loss() {
    type A = burn::backend::Autodiff<B>;
    let device = &device();
    let shapes = [
        (7, 13, 5),
        (130, 70, 9),
        (97, 300, 32),
        (2, 5, 33),
        (300, 64, 257),
    ];
    for (k, &(b, i, c)) in shapes.iter().enumerate() {
        let data = HeadData::random(890 + k as u64, b, i, c);
        for activation in [HeadActivation::Relu, HeadActivation::Identity] {
            let context = format!("predictions {activation:?} B={b} I={i} C={c}");
            let want = reference_stages_with(&data, 1.0, activation).h;
            let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
            let (loss, predictions) = fused_linear_cross_entropy_and_predictions(
                x.clone(),
                w.clone(),
                Some(bias.clone()),
                labels.clone(),
                &opts(activation),
            );
            let plain =
                fused_linear_cross_entropy(x, w, Some(bias), labels.clone(), &opts(activation));
            assert_eq!(to_f64(loss), to_f64(plain), "{context}: loss");
            assert_eq!(predictions.dtype(), labels.dtype(), "{context}: dtype");
            assert_predictions(&context, &to_i64(predictions), &want, c);

            let grads = |predict: bool| {
                let (x, w, bias, labels) = data.tensors::<A>(device, DType::F32);
                head_grads(x, w, bias, labels.clone(), 1.0, |x, w, b, l| {
                    if predict {
                        let (loss, p) = fused_linear_cross_entropy_and_predictions(
                            x,
                            w,
                            Some(b),
                            l,
                            &opts(activation),
                        );
                        assert_predictions(&context, &to_i64(p), &want, c);
                        loss
                    } else {
                        fused_linear_cross_entropy(x, w, Some(b), l, &opts(activation))
                    }
                })
            };
            let (with, without) = (grads(true), grads(false));
            assert_eq!(
                (with.loss, &with.dx, &with.dw, &with.db),
                (without.loss, &without.dx, &without.dw, &without.db),
                "{context}: autodiff"
            );
        }
    }
}

/// Ties go to the first class: rows whose every ReLU logit is 0 (dead) predict class 0, and a
/// row whose largest logit is held by two identical classes (2 and 5, or 2 and 37) predicts the
/// first of them, with ReLU and, where every logit is negative, with the identity; on both
/// sides of C = 32.
#[test]
fn predictions_break_ties_toward_the_first_class() {
    let device = &device();
    for c in [8, 40] {
        let mut data = HeadData::random(895, 12, 6, c);
        let twin = if c > 32 { 37 } else { 5 };
        let (src, dst) = (2 * data.inputs, twin * data.inputs);
        let copy: Vec<f32> = data.weight[src..src + data.inputs].to_vec();
        data.weight[dst..dst + data.inputs].copy_from_slice(&copy);
        data.bias[2] = 50.0;
        data.bias[twin] = 50.0;
        let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
        let (_, predictions) =
            fused_linear_cross_entropy_and_predictions(x, w, Some(bias), labels, &relu_options());
        let got = to_i64(predictions);
        // Every row: the twins hold 50 + the same dot product, the largest logit; the first
        // of them is class 2.
        assert!(got.iter().all(|&p| p == 2), "C = {c}: {got:?}");

        // Dead rows: every logit <= 0.
        let mut dead = data.clone();
        for v in &mut dead.bias {
            *v = -1.0 - v.abs();
        }
        for r in 0..dead.batch {
            dead.x[r * dead.inputs..(r + 1) * dead.inputs].fill(0.0);
        }
        let (x, w, bias, labels) = dead.tensors::<B>(device, DType::F32);
        let (_, predictions) = fused_linear_cross_entropy_and_predictions(
            x.clone(),
            w.clone(),
            Some(bias.clone()),
            labels.clone(),
            &relu_options(),
        );
        let got = to_i64(predictions);
        assert!(got.iter().all(|&p| p == 0), "C = {c}, dead rows: {got:?}");

        // The identity on the same rows: every logit is its bias, all negative, the largest
        // -1 - |b| held by the twins only if they hold the smallest |b|: give the twins -0.5.
        let mut twins = dead.clone();
        twins.bias[2] = -0.5;
        twins.bias[twin] = -0.5;
        let (x, w, bias, labels) = twins.tensors::<B>(device, DType::F32);
        let (_, predictions) = fused_linear_cross_entropy_and_predictions(
            x,
            w,
            Some(bias),
            labels,
            &opts(HeadActivation::Identity),
        );
        let got = to_i64(predictions);
        assert!(
            got.iter().all(|&p| p == 2),
            "C = {c}, identity, negative twins: {got:?}"
        );
    }
}
