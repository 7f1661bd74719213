/// Loss, dX, dW and db of the streamed path against the f64 reference and against the same
/// backend's stages, over the chunk switches of [`SHAPES`].
#[test]
fn streamed_path_matches_the_reference_and_the_stages() {
    let device = &device();
    for (k, &(b, i, c, elements)) in SHAPES.iter().enumerate() {
        let data = HeadData::random(900 + k as u64, b, i, c);
        let got = streamed::<B>(
            device,
            &data,
            HeadWanted::ALL,
            HeadPrecision::Exact,
            elements,
        );
        let context = format!("streamed B={b} I={i} C={c} chunk elements={elements}");
        let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
        let stages = run_stages(x, w, bias, labels, 1.0);
        for (against, want) in [
            ("the reference", reference_stages(&data, 1.0)),
            ("the stages", stages),
        ] {
            assert_gates(
                &format!("{context}, against {against}"),
                &[
                    gate("loss", &[got.loss], &[want.loss]),
                    gate("dX", got.dx.as_ref().unwrap(), &want.dx),
                    gate("dW", got.dw.as_ref().unwrap(), &want.dw),
                    gate("db", got.db.as_ref().unwrap(), &want.db),
                ],
            );
        }
    }
}

/// Every subset of wanted gradients gives exactly those, with the bits of the full call; the
/// empty subset gives the loss alone.
#[test]
fn streamed_path_returns_exactly_the_wanted_gradients() {
    let device = &device();
    let data = HeadData::random(31, 23, 17, 45);
    let elements = 45 * 4; // chunks of 4 rows
    let all = streamed::<B>(
        device,
        &data,
        HeadWanted::ALL,
        HeadPrecision::Exact,
        elements,
    );
    for bits in 0..8u8 {
        let wanted = HeadWanted {
            x: bits & 1 != 0,
            weight: bits & 2 != 0,
            bias: bits & 4 != 0,
        };
        let got = streamed::<B>(device, &data, wanted, HeadPrecision::Exact, elements);
        assert_eq!(got.loss.to_bits(), all.loss.to_bits(), "{wanted:?}: loss");
        let pick = |want: bool, v: &Option<Vec<f64>>| want.then(|| v.clone().unwrap());
        assert_eq!(got.dx, pick(wanted.x, &all.dx), "{wanted:?}: dX");
        assert_eq!(got.dw, pick(wanted.weight, &all.dw), "{wanted:?}: dW");
        assert_eq!(got.db, pick(wanted.bias, &all.db), "{wanted:?}: db");
    }
}

/// Same inputs, same bits, call after call, in both precisions and across chunkings' reruns.
#[test]
fn streamed_path_gives_the_same_bits_every_call() {
    let device = &device();
    let data = HeadData::random(37, 131, 72, 300);
    for precision in [HeadPrecision::Exact, HeadPrecision::Tf32] {
        for elements in [300 * 7, 0] {
            let first = streamed::<B>(device, &data, HeadWanted::ALL, precision, elements);
            let second = streamed::<B>(device, &data, HeadWanted::ALL, precision, elements);
            assert_eq!(first, second, "{precision:?}, chunk elements {elements}");
        }
    }
}

/// The lean mode on f32 tensors: dW already sums in its own type, so over the same chunks it
/// gives the bits of the f32 accumulation, in both precisions (only its chunk budget differs).
#[test]
fn lean_f32_gives_the_bits_of_the_same_chunks() {
    let device = &device();
    let data = HeadData::random(41, 97, 40, 130);
    for precision in [HeadPrecision::Exact, HeadPrecision::Tf32] {
        let options = relu_options().with_precision(precision);
        let lean = options
            .clone()
            .with_accumulation(burn_fused_head::HeadAccumulation::Lean);
        let want = streamed::<B>(device, &data, HeadWanted::ALL, options, 130 * 13);
        let got = streamed::<B>(device, &data, HeadWanted::ALL, lean, 130 * 13);
        assert_eq!(got, want, "{precision:?}");
    }
}

/// Rounded logits (`HeadLogits::Rounded`) on f32 tensors: nothing to round to, so the bits of
/// the f32 logits, in both precisions and both accumulations, over ragged chunks.
#[test]
fn rounded_logits_on_f32_give_the_bits_of_f32_logits() {
    let device = &device();
    let data = HeadData::random(43, 97, 40, 130);
    for precision in [HeadPrecision::Exact, HeadPrecision::Tf32] {
        for accumulation in [
            burn_fused_head::HeadAccumulation::F32,
            burn_fused_head::HeadAccumulation::Lean,
        ] {
            let options = relu_options()
                .with_precision(precision)
                .with_accumulation(accumulation);
            let rounded = options
                .clone()
                .with_logits(burn_fused_head::HeadLogits::Rounded);
            let want = streamed::<B>(device, &data, HeadWanted::ALL, options, 130 * 13);
            let got = streamed::<B>(device, &data, HeadWanted::ALL, rounded, 130 * 13);
            assert_eq!(got, want, "{precision:?} {accumulation:?}");
        }
    }
}

/// Through `Autodiff<B>` (the public function), scaled by an upstream gradient of -1.5, in
/// chunks of 5 rows: the gradients of stock Burn's autodiff.
#[test]
fn autodiff_streams_and_scales_by_the_upstream_gradient() {
    let device = &device();
    let data = HeadData::random(41, 37, 29, 70);
    let got = autodiff_grads::<B>(device, &data, -1.5, 70 * 5);
    assert_grads(
        "streamed autodiff, g = -1.5",
        &got,
        &stock_grads(&data, -1.5),
    );
}

/// The head's loss beside another loss on W (gradient accumulation in one backward pass):
/// `0.5 head + 0.01 sum(W^2)`, against the same sum on stock Burn.
#[test]
fn streamed_gradients_add_to_another_loss() {
    let device = &device();
    let data = HeadData::random(43, 19, 11, 50);
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let options = chunks(HeadPrecision::Exact, 50 * 3);
    let loss = fused_linear_cross_entropy(x.clone(), w.clone(), Some(b.clone()), labels, &options);
    let grads = beside_another_loss(loss, w.clone()).backward();
    let got = [
        values(x.grad(&grads).unwrap()),
        values(w.grad(&grads).unwrap()),
        values(b.grad(&grads).unwrap()),
    ];
    let (rx, rw, rb, rl) = data.tensors::<Autodiff<Reference>>(&reference_device(), DType::F64);
    let (rx, rw, rb) = (rx.require_grad(), rw.require_grad(), rb.require_grad());
    let ref_grads = beside_another_loss(
        stock_head_loss(rx.clone(), rw.clone(), rb.clone(), rl),
        rw.clone(),
    )
    .backward();
    let want = [
        values(rx.grad(&ref_grads).unwrap()),
        values(rw.grad(&ref_grads).unwrap()),
        values(rb.grad(&ref_grads).unwrap()),
    ];
    let reports: Vec<_> = ["dX", "dW", "db"]
        .iter()
        .enumerate()
        .map(|(k, name)| gate(name, &got[k], &want[k]))
        .collect();
    assert_gates("streamed head beside another loss", &reports);
}

/// The numerical hazards at C > 32, streamed in chunks of 3 rows: logits near 1e4 (exact in f32,
/// so the test isolates the softmax), dead rows (every Z <= 0: loss ln C, no gradient),
/// confident rows (p of the label near 1), and X and W as transposed views.
#[test]
fn streamed_hazards_pass_the_gates() {
    let device = &device();
    let c = 40;
    let elements = c * 3;

    let mut large = HeadData::random(47, 19, 8, c);
    large.x.iter_mut().for_each(|v| *v = (*v * 4.0).round());
    large
        .weight
        .iter_mut()
        .for_each(|v| *v = (*v * 1000.0).round() * 2.0);
    large
        .bias
        .iter_mut()
        .for_each(|v| *v = (*v * 1000.0).round());

    let mut dead = HeadData::random(53, 24, 16, c);
    dead.bias.iter_mut().for_each(|v| *v = -0.5 - v.abs());
    for r in 0..dead.batch / 2 {
        dead.x[r * dead.inputs..(r + 1) * dead.inputs].fill(0.0);
    }

    let mut confident = HeadData::random(59, 40, 12, c);
    confident.weight.iter_mut().for_each(|v| *v *= 25.0);
    for r in 0..confident.batch {
        let h = |k: usize| {
            let z: f64 = (0..confident.inputs)
                .map(|j| {
                    confident.x[r * confident.inputs + j] as f64
                        * confident.weight[k * confident.inputs + j] as f64
                })
                .sum::<f64>()
                + confident.bias[k] as f64;
            z.max(0.0)
        };
        confident.labels[r] = (0..c).max_by(|a, b| h(*a).total_cmp(&h(*b))).unwrap() as i64;
    }

    for (name, data) in [
        ("logits near 1e4", &large),
        ("dead rows", &dead),
        ("confident rows", &confident),
    ] {
        let got = autodiff_grads::<B>(device, data, 1.0, elements);
        assert_grads(&format!("streamed, {name}"), &got, &stock_grads(data, 1.0));
        assert!(got.loss.is_finite(), "{name}: loss {}", got.loss);
    }

    let data = HeadData::random(61, 21, 10, c);
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
    let transposed_view = |t: Tensor<Autodiff<B>, 2>| {
        let stored =
            Tensor::<Autodiff<B>, 2>::from_data(t.transpose().into_data(), (device, DType::F32));
        stored.transpose() // strides (1, rows)
    };
    let (x, w) = (transposed_view(x), transposed_view(w));
    let options = chunks(HeadPrecision::Exact, elements);
    let got = head_grads(x, w, b, labels, 1.0, |x, w, b, l| {
        fused_linear_cross_entropy(x, w, Some(b), l, &options)
    });
    assert_grads("streamed, transposed views", &got, &stock_grads(&data, 1.0));
}

/// The TF32 gate is not vacuous: the exact gradients pass it, and gradients off by 5% fail it
/// (its median allowance is about 1% of a gradient at these sizes).
#[test]
fn the_tf32_gate_fails_gradients_off_by_five_percent() {
    let data = HeadData::random(67, 64, 72, 40);
    let want = reference_stages(&data, 1.0);
    let slack = burn_fused_head_testing::gates::tf32_slack(&data, 1.0);
    use burn_fused_head_testing::gates::gate_with_slack;
    for (name, v, s) in [
        ("dX", &want.dx, &slack.dx),
        ("dW", &want.dw, &slack.dw),
        ("db", &want.db, &slack.db),
    ] {
        assert!(
            gate_with_slack(name, v, v, s).passed(),
            "{name}: exact values fail"
        );
        let off: Vec<f64> = v.iter().map(|x| x * 1.05).collect();
        let report = gate_with_slack(name, &off, v, s);
        assert!(
            !report.passed(),
            "{name}: 5% off passes the TF32 gate: {report}"
        );
        let mut ratios: Vec<f64> = v.iter().zip(s.iter()).map(|(x, a)| a / x.abs()).collect();
        ratios.sort_by(f64::total_cmp);
        eprintln!(
            "{name}: median allowance / |value| = {:.4}",
            ratios[ratios.len() / 2]
        );
    }
}

/// `HeadActivation::Identity` on the streamed path, over the chunk switches of [`SHAPES`]:
/// loss, dX, dW and db against the f64 reference with the identity; and through `Autodiff<B>`
/// in chunks of 5 rows, scaled by -1.5, against stock Burn's autodiff of the logits and
/// `CrossEntropyLoss`.
#[test]
fn identity_streamed_path_matches_the_reference() {
    let device = &device();
    for (k, &(b, i, c, elements)) in SHAPES.iter().enumerate() {
        let data = HeadData::random(950 + k as u64, b, i, c);
        let identity = HeadActivation::Identity;
        let got = streamed::<B>(device, &data, HeadWanted::ALL, identity, elements);
        let want = reference_stages_with(&data, 1.0, identity);
        assert_gates(
            &format!("identity streamed B={b} I={i} C={c} chunk elements={elements}"),
            &[
                gate("loss", &[got.loss], &[want.loss]),
                gate("dX", got.dx.as_ref().unwrap(), &want.dx),
                gate("dW", got.dw.as_ref().unwrap(), &want.dw),
                gate("db", got.db.as_ref().unwrap(), &want.db),
            ],
        );
    }
    let data = HeadData::random(960, 37, 29, 70);
    let context = "identity streamed autodiff";
    check_identity_autodiff::<Autodiff<B>>(device, &data, -1.5, context, 70 * 5);
}

/// The predictions of the streamed path's row kernel over the chunk switches of [`SHAPES`]
/// (chunks of 1 row, ragged last chunks), both activations: the argmax of the f64 reference's
/// H (up to f32 near ties), in the labels' dtype, beside the op's loss bit for bit.
#[test]
fn streamed_predictions_are_the_argmax_of_h() {
    let device = &device();
    for (k, &(b, i, c, elements)) in SHAPES.iter().enumerate() {
        let data = HeadData::random(970 + k as u64, b, i, c);
        for activation in [HeadActivation::Relu, HeadActivation::Identity] {
            let context = format!(
                "streamed predictions {activation:?} B={b} I={i} C={c} chunk elements={elements}"
            );
            let (x, w, bias, labels) = data.tensors::<B>(device, DType::F32);
            let options = chunks(activation, elements);
            let (loss, predictions) = fused_linear_cross_entropy_and_predictions(
                x.clone(),
                w.clone(),
                Some(bias.clone()),
                labels.clone(),
                &options,
            );
            let plain = fused_linear_cross_entropy(x, w, Some(bias), labels.clone(), &options);
            let (loss, plain) = (values(loss), values(plain));
            assert_eq!(loss, plain, "{context}: loss");
            assert_eq!(predictions.dtype(), labels.dtype(), "{context}: dtype");
            let want = reference_stages_with(&data, 1.0, activation).h;
            assert_predictions(&context, &to_i64(predictions), &want, c);
        }
    }
}
