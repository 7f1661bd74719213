// The tests of `logit_terms.rs`, included once per backend (`B`, `device()` in scope).

/// C = 5 and C = 40 with this loss.
fn both_sizes(context: &str, labels: &[(usize, i64)], loss: &HeadOptions) {
    let device = &device();
    for (seed, classes) in [(21, 5), (22, 40)] {
        let d = data(seed, 13, 8, classes, labels);
        check::<B>(device, &format!("{context}, C = {classes}"), &d, loss);
    }
}

#[test]
fn a_logit_scale_divides_the_temperature_out() {
    for s in [0.5, 3.0, -1.5] {
        let loss = HeadOptions::new().with_logit_scale(Some(s));
        both_sizes(&format!("scale {s}"), &[], &loss);
    }
}

#[test]
fn a_softcap_bounds_the_logits_and_its_gradient_stays_exact_when_saturated() {
    let loss = HeadOptions::new().with_softcap(Some(2.0));
    both_sizes("softcap 2", &[], &loss);
    // Every logit saturated in f32: b = +-(60 .. 72), a scale of 0.5 and a cap of 3 put
    // u = s z / cap at 10 to 12, where tanh(u) is 1 in f32 and the slope `1 - tanh(u)^2` is
    // about 4 e^(-2 |u|) (8e-9 .. 1.5e-10): a slope from `1 - t^2` would be 0. (In f64, Burn's
    // tanh and its `1 - t^2` gradient keep 6 or more digits there; they lose them past
    // u = 15.) An upstream gradient of 1e9 lifts dW and db, class by class, well above the
    // gate's absolute term.
    let device = &device();
    let mut big = data(23, 11, 6, 40, &[]);
    for (c, b) in big.bias.iter_mut().enumerate() {
        let sign = if c % 2 == 0 { 1.0 } else { -1.0 };
        *b = sign * (60.0 + 0.3 * c as f32);
    }
    let loss = HeadOptions::new()
        .with_softcap(Some(3.0))
        .with_logit_scale(Some(0.5));
    check_with_gain::<B>(device, "softcap 3, saturated", &big, &loss, 1e9);
}

#[test]
fn a_step_takes_the_logit_terms_without_row_weights() {
    // `FusedHeadBackend::head_step` with a logit scale, a softcap and a z-loss and no row
    // weights (the route the op takes for them alone where the backend streams): the mean's loss and gradients, against
    // the formula for a unit upstream gradient. C = 40 streams on the CubeCL backends with no
    // row weight at all; C = 5 and the other backends weigh each row 1/B.
    let device = device();
    for classes in [5, 40] {
        // An empty batch: the terms change nothing (a NaN mean, zero gradients).
        let empty = HeadData::random(27, 0, 8, classes);
        let (x, w, b, labels) = empty.tensors::<B>(&device, DType::F32);
        let out = B::head_step(
            x.into_primitive().tensor(),
            w.into_primitive().tensor(),
            b.into_primitive().tensor(),
            labels.into_primitive(),
            HeadStep::loss()
                .with_wanted(HeadWanted::ALL)
                .with_terms(RowTerms {
                    softcap: Some(2.5),
                    z_loss: 0.1,
                    ..RowTerms::new(HeadActivation::Relu)
                }),
            HeadOptions::new().kernels(),
        );
        let float = |t| burn::tensor::TensorPrimitive::Float(t);
        let loss = to_f64(Tensor::<B, 1>::from_primitive(float(out.loss)));
        assert!(loss.len() == 1 && loss[0].is_nan(), "B = 0: {loss:?}");
        let dw = to_f64(Tensor::<B, 2>::from_primitive(float(
            out.gradients.weight.unwrap(),
        )));
        assert!(dw.iter().all(|v| *v == 0.0), "B = 0: dW {dw:?}");

        let d = data(26, 13, 8, classes, &[]);
        // (logit scale, softcap, z-loss): the two terms, the z-loss alone, all three.
        let sets = [
            (0.75, Some(2.5), 0.0),
            (1.0, None, 0.1),
            (0.75, Some(2.5), 0.05),
        ];
        for ((scale, cap, zeta), act) in sets
            .into_iter()
            .flat_map(|t| [HeadActivation::Identity, HeadActivation::Relu].map(|a| (t, a)))
        {
            let options = HeadOptions::new()
                .with_activation(act)
                .with_logit_scale((scale != 1.0).then_some(scale))
                .with_softcap(cap)
                .with_z_loss((zeta != 0.0).then_some(zeta));
            let terms = RowTerms {
                logit_scale: scale,
                softcap: cap,
                z_loss: zeta,
                ..RowTerms::new(act)
            };
            let (x, w, b, labels) = d.tensors::<B>(&device, DType::F32);
            let out = B::head_step(
                x.into_primitive().tensor(),
                w.into_primitive().tensor(),
                b.into_primitive().tensor(),
                labels.into_primitive(),
                HeadStep::loss()
                    .with_wanted(HeadWanted::ALL)
                    .with_terms(terms),
                options.kernels(),
            );
            let float = |t| burn::tensor::TensorPrimitive::Float(t);
            let grads = out.gradients;
            let want = terms_formula(&d, &options, &[1.0]);
            let read = |t: Option<_>| to_f64(Tensor::<B, 2>::from_primitive(float(t.unwrap())));
            assert_gates(
                &format!(
                    "head_step without row weights, C = {classes}, {act:?}, scale {scale}, \
                     softcap {cap:?}, z-loss {zeta}"
                ),
                &[
                    gate(
                        "loss",
                        &to_f64(Tensor::<B, 1>::from_primitive(float(out.loss))),
                        &want.out,
                    ),
                    gate("dX", &read(grads.x), &want.dx),
                    gate("dW", &read(grads.weight), &want.dw),
                    gate(
                        "db",
                        &to_f64(Tensor::<B, 1>::from_primitive(float(grads.bias.unwrap()))),
                        &want.db,
                    ),
                ],
            );
        }
    }
}

#[test]
fn z_loss_adds_zeta_lse_squared_per_row() {
    let loss = HeadOptions::new().with_z_loss(Some(0.1));
    both_sizes("z-loss 0.1", &[], &loss);
    let loss = HeadOptions::new()
        .with_z_loss(Some(1e-4))
        .with_reduction(HeadReduction::None);
    both_sizes("z-loss 1e-4, none", &[], &loss);
}

#[test]
fn every_term_with_every_loss_option() {
    let w = |c: usize| {
        (0..c)
            .map(|k| 0.5 + (k % 3) as f32 * 0.5)
            .collect::<Vec<_>>()
    };
    // Without smoothing, C = 40 streams on the CubeCL backends (chunks of 5 rows with
    // `chunk_elements`); smoothing takes the materialized path.
    for reduction in [HeadReduction::Mean, HeadReduction::Sum, HeadReduction::None] {
        for classes in [5, 40] {
            for (smoothing, chunk) in [(Some(0.1), None), (None, None), (None, Some(5 * 40))] {
                let loss = HeadOptions::new()
                    .with_logit_scale(Some(1.7))
                    .with_softcap(Some(4.0))
                    .with_z_loss(Some(0.05))
                    .with_ignore_index(Some(-100))
                    .with_class_weights(Some(w(classes)))
                    .with_smoothing(smoothing)
                    .with_chunk_elements(chunk)
                    .with_reduction(reduction);
                let d = data(24, 12, 7, classes, &[(3, -100), (8, -100)]);
                let context = format!(
                    "every term, {reduction:?}, C = {classes}, smoothing {smoothing:?}, \
                     chunk {chunk:?}"
                );
                check::<B>(&device(), &context, &d, &loss);
            }
        }
    }
}

#[test]
fn the_terms_without_gradients_and_every_row_ignored() {
    // The untracked call (no gradient wanted) on a batch whose rows are all ignored: a sum of
    // 0 (the z-term too), a log-probability of 0, the log-sum-exp still given.
    let device = device();
    for classes in [5, 40] {
        let data = data(
            29,
            4,
            3,
            classes,
            &[(0, -100), (1, -100), (2, -100), (3, -100)],
        );
        let (x, w, b, labels) = data.tensors::<B>(&device, DType::F32);
        let options = HeadOptions::new()
            .with_ignore_index(Some(-100))
            .with_z_loss(Some(0.1))
            .with_softcap(Some(3.0))
            .with_reduction(HeadReduction::Sum);
        let (loss, stats) =
            fused_linear_cross_entropy_with_token_stats(x, w, Some(b), labels, &options);
        assert_eq!(to_f64(loss), vec![0.0], "C = {classes}");
        assert_eq!(to_f64(stats.target_log_prob), vec![0.0; 4], "C = {classes}");
        assert!(to_f64(stats.log_sum_exp).iter().all(|v| v.is_finite()));
    }
}

#[test]
fn token_stats_of_the_plain_loss_and_of_ignored_rows() {
    both_sizes("plain", &[], &HeadOptions::new());
    let loss = HeadOptions::new().with_ignore_index(Some(-100));
    both_sizes("ignore_index", &[(1, -100), (6, -100)], &loss);
}

#[test]
fn token_stats_come_in_the_targets_shape() {
    let device = device();
    let data = HeadData::random(25, 6, 4, 9);
    let (x, w, b, labels) = data.tensors::<B>(&device, DType::F32);
    let x = x.reshape([2, 3, 4]);
    let labels = labels.reshape([2, 3]);
    let (loss, stats) =
        fused_linear_cross_entropy_with_token_stats(x, w, Some(b), labels, &HeadOptions::new());
    assert_eq!(loss.dims(), [1]);
    assert_eq!(stats.log_sum_exp.dims(), [2, 3]);
    assert_eq!(stats.target_log_prob.dims(), [2, 3]);
    assert_eq!(stats.entropy.dims(), [2, 3]);
    // The mean of -log p[y] is the loss.
    let mean = -to_f64(stats.target_log_prob).iter().sum::<f64>() / 6.0;
    let loss = to_f64(loss)[0];
    assert!(
        (mean - loss).abs() <= 1e-5 * loss.abs().max(1.0),
        "{mean} vs {loss}"
    );
}

#[test]
fn predictions_are_the_argmax_of_the_scaled_logits() {
    // A negative scale turns the argmax of act(Z) into its argmin.
    let device = device();
    for classes in [5, 40] {
        let data = HeadData::random(26, 9, 6, classes);
        let (x, w, b, labels) = data.tensors::<B>(&device, DType::F32);
        let options = HeadOptions::new().with_logit_scale(Some(-2.0));
        let (_, predictions) =
            fused_linear_cross_entropy_and_predictions(x, w, Some(b), labels, &options);
        let got = to_i64(predictions);
        let (x, w, b, _) = data.tensors::<Reference>(&reference_device(), DType::F64);
        let z = to_f64(x.matmul(w.transpose()) + b.unsqueeze_dim(0));
        let want: Vec<i64> = z
            .chunks(classes)
            .map(|row| {
                let low = row.iter().cloned().fold(f64::INFINITY, f64::min);
                row.iter().position(|&v| v == low).unwrap() as i64
            })
            .collect();
        assert_eq!(got, want, "C = {classes}");
    }
}

#[test]
fn the_module_forward_gives_the_logits_the_softmax_sees() {
    let device = device();
    let head = FusedLinearCrossEntropyConfig::new(6, 7)
        .with_logit_scale(Some(2.5))
        .with_softcap(Some(1.5))
        .init::<B>(&device);
    let data = HeadData::random(27, 5, 6, 7);
    // In the parameters' dtype: on NdArray the device's default float (which the f64
    // reference of another test may have set first in this process).
    let (x, _, _, _) = data.tensors::<B>(&device, head.weight.dtype());
    let got = to_f64(head.forward(x.clone()));
    let w = to_f64(head.weight.val());
    let b = to_f64(head.bias.as_ref().unwrap().val());
    let x = to_f64(x);
    for r in 0..5 {
        for c in 0..7 {
            let z: f64 = (0..6).map(|i| x[r * 6 + i] * w[c * 6 + i]).sum::<f64>() + b[c];
            let want = 1.5 * (2.5 * z / 1.5).tanh();
            let have = got[r * 7 + c];
            assert!(
                (have - want).abs() <= 2e-5 + 2e-4 * want.abs(),
                "[{r}, {c}]: {have} vs {want}"
            );
        }
    }
}

#[test]
fn the_module_forward_gradient_stays_exact_when_saturated() {
    // u = s z / cap of 10 to 12 in every logit (b = +-(60 ..), s = 0.5, cap = 3): tanh(u) is
    // 1 in f32, and the softcap's slope s 4 e / (1 + e)^2, e = exp(-2 |u|), is 1e-10 to 1e-9;
    // Burn's `1 - tanh^2` would give 0. An upstream gradient of 1e9 per element lifts db above
    // the gate's absolute term.
    type AB = Autodiff<B>;
    let device = device();
    let (batch, inputs, classes) = (5, 4, 6);
    let data = HeadData::random(30, batch, inputs, classes);
    let bias: Vec<f32> = (0..classes)
        .map(|c| (if c % 2 == 0 { 1.0 } else { -1.0 }) * (60.0 + 0.3 * c as f32))
        .collect();
    let (x, w, _, _) = data.tensors::<AB>(&device, DType::F32);
    let b = Tensor::<AB, 1>::from_data(
        TensorData::new(bias.clone(), [classes]),
        (&device, DType::F32),
    );
    let head = FusedLinearCrossEntropy {
        weight: Param::from_tensor(w),
        bias: Some(Param::from_tensor(b)),
        options: HeadOptions::new()
            .with_logit_scale(Some(0.5))
            .with_softcap(Some(3.0)),
    };
    let gain = 1e9;
    let grads = (head.forward(x.clone()) * gain).sum().backward();
    let got = to_f64(head.bias.as_ref().unwrap().val().grad(&grads).unwrap());
    let (x, w) = (
        to_f64(x),
        data.weight.iter().map(|&v| v as f64).collect::<Vec<_>>(),
    );
    for c in 0..classes {
        let want: f64 = (0..batch)
            .map(|r| {
                let z = (0..inputs)
                    .map(|i| x[r * inputs + i] * w[c * inputs + i])
                    .sum::<f64>()
                    + bias[c] as f64;
                let e = (-2.0 * (0.5 * z / 3.0).abs()).exp();
                gain * 0.5 * 4.0 * e / ((1.0 + e) * (1.0 + e))
            })
            .sum();
        let have = got[c];
        assert!(
            (have - want).abs() <= 2e-5 + 2e-4 * want.abs(),
            "db[{c}]: {have} vs {want}"
        );
    }
}

#[test]
fn a_target_outside_the_classes_gets_a_nan_log_prob_and_loss() {
    let device = device();
    for classes in [5, 40] {
        let mut data = HeadData::random(28, 4, 3, classes);
        data.labels[2] = classes as i64 + 3;
        let (x, w, b, labels) = data.tensors::<B>(&device, DType::F32);
        let options = HeadOptions::new().with_reduction(HeadReduction::None);
        let (loss, stats) =
            fused_linear_cross_entropy_with_token_stats(x, w, Some(b), labels, &options);
        let (loss, log_prob) = (to_f64(loss), to_f64(stats.target_log_prob));
        for r in 0..4 {
            assert_eq!(loss[r].is_nan(), r == 2, "C = {classes}, loss {loss:?}");
            assert_eq!(log_prob[r].is_nan(), r == 2, "C = {classes}, {log_prob:?}");
        }
        assert!(to_f64(stats.entropy).iter().all(|v| v.is_finite()));
    }
}
