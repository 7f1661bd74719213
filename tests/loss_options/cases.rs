/// C = 5 (every backend's materialized path) and C = 40 (the CubeCL backends' streamed path,
/// in chunks of 4 rows: 4, 4, 4 and 1 of the 13), with this loss.
fn both_sizes(context: &str, ignore: &[(usize, i64)], loss: &HeadOptions) {
    let device = &device();
    let small = data(11, 13, 8, 5, ignore);
    check::<B>(device, &format!("{context}, C = 5"), &small, loss, 0);
    let large = data(12, 13, 8, 40, ignore);
    check::<B>(device, &format!("{context}, C = 40"), &large, loss, 4 * 40);
}

#[test]
fn ignore_index_leaves_rows_out_of_the_loss_the_gradients_and_the_mean() {
    let loss = HeadOptions::new().with_ignore_index(Some(-100));
    both_sizes("ignore_index", &[(2, -100), (7, -100), (12, -100)], &loss);
}

#[test]
fn pad_tokens_are_ignored_rows() {
    let loss = HeadOptions::new().with_pad_tokens(Some(vec![1, 3]));
    both_sizes("pad_tokens", &[(0, 1), (5, 3), (6, 1)], &loss);
}

#[test]
fn class_weights_make_a_weighted_mean_and_a_weighted_sum() {
    let weights = |c: usize| {
        (0..c)
            .map(|k| 0.25 + (k % 4) as f32 * 0.5)
            .collect::<Vec<_>>()
    };
    for reduction in [HeadReduction::Mean, HeadReduction::Sum] {
        let device = &device();
        for (classes, chunk) in [(5, 0), (40, 3 * 40)] {
            let loss = HeadOptions::new()
                .with_class_weights(Some(weights(classes)))
                .with_ignore_index(Some(-1))
                .with_reduction(reduction);
            let d = data(13, 11, 8, classes, &[(4, -1)]);
            let context = format!("weights, {reduction:?}, C = {classes}");
            check::<B>(device, &context, &d, &loss, chunk);
        }
    }
}

#[test]
fn label_smoothing_with_and_without_class_weights() {
    let plain = HeadOptions::new().with_smoothing(Some(0.1));
    both_sizes("smoothing", &[], &plain);
    let device = &device();
    for classes in [5, 40] {
        let w = (0..classes).map(|k| 1.0 + (k % 3) as f32).collect();
        let loss = HeadOptions::new()
            .with_smoothing(Some(0.2))
            .with_class_weights(Some(w))
            .with_ignore_index(Some(-100));
        let d = data(14, 9, 8, classes, &[(3, -100)]);
        check::<B>(
            device,
            &format!("smoothing, weights, C = {classes}"),
            &d,
            &loss,
            0,
        );
    }
}

#[test]
fn reduction_none_gives_each_rows_loss_and_takes_a_gradient_per_row() {
    let loss = HeadOptions::new()
        .with_reduction(HeadReduction::None)
        .with_ignore_index(Some(-100));
    both_sizes("none", &[(1, -100), (8, -100)], &loss);
    let weighted = HeadOptions::new()
        .with_reduction(HeadReduction::None)
        .with_class_weights(Some((0..40).map(|k| 0.5 + (k % 5) as f32 * 0.3).collect()));
    let device = &device();
    let d = data(15, 13, 8, 40, &[]);
    check::<B>(device, "none, weights, C = 40", &d, &weighted, 5 * 40);
    let smoothed = HeadOptions::new()
        .with_reduction(HeadReduction::None)
        .with_smoothing(Some(0.3));
    let d = data(16, 7, 8, 5, &[]);
    check::<B>(device, "none, smoothing, C = 5", &d, &smoothed, 0);
}

#[test]
fn the_sum_with_ignored_rows() {
    let loss = HeadOptions::new()
        .with_reduction(HeadReduction::Sum)
        .with_ignore_index(Some(-100));
    both_sizes("sum", &[(0, -100), (12, -100)], &loss);
}

#[test]
fn plain_options_are_the_op_itself_bit_for_bit() {
    let device = &device();
    for classes in [5, 40] {
        let d = HeadData::random(17, 13, 8, classes);
        let (x, w, b, labels) = d.tensors::<B>(device, DType::F32);
        let want = fused_linear_cross_entropy(
            x.clone(),
            w.clone(),
            Some(b.clone()),
            labels.clone(),
            &opts(HeadActivation::Identity),
        );
        let plain = HeadOptions::new()
            .with_pad_tokens(Some(vec![]))
            .with_smoothing(Some(0.0));
        assert!(plain.is_plain());
        let got = fused_linear_cross_entropy(
            x,
            w,
            Some(b),
            labels,
            &with_loss(&plain, HeadActivation::Identity),
        );
        assert_eq!(got.into_data(), want.into_data(), "C = {classes}");
    }
}

#[test]
fn without_autodiff_the_result_alone_meets_the_gates() {
    let device = &device();
    for (classes, reduction) in [
        (5, HeadReduction::None),
        (40, HeadReduction::Mean),
        (40, HeadReduction::None),
    ] {
        let loss = HeadOptions::new()
            .with_ignore_index(Some(-100))
            .with_class_weights(Some((0..classes).map(|k| 1.0 + (k % 2) as f32).collect()))
            .with_reduction(reduction);
        let d = data(18, 10, 8, classes, &[(6, -100)]);
        let (x, w, b, labels) = d.tensors::<B>(device, DType::F32);
        let got = fused_linear_cross_entropy(
            x,
            w,
            Some(b),
            labels,
            &with_loss(&loss, HeadActivation::Relu),
        );
        let want = pytorch(&d, &loss, HeadActivation::Relu, &upstream(&loss, d.batch));
        assert_gates(
            &format!("untracked, C = {classes}, {reduction:?}"),
            &[gate("result", &to_f64(got), &want.out)],
        );
    }
}

#[test]
fn a_label_outside_the_classes_that_is_not_ignored_gives_nan() {
    let device = &device();
    for classes in [5, 40] {
        for reduction in [HeadReduction::Mean, HeadReduction::None] {
            let loss = HeadOptions::new()
                .with_ignore_index(Some(-100))
                .with_reduction(reduction);
            let d = data(19, 6, 8, classes, &[(1, -100), (3, classes as i64)]);
            let got = ours::<B>(device, &d, &loss, HeadActivation::Relu, &upstream(&loss, 6));
            let context = format!("C = {classes}, {reduction:?}");
            match reduction {
                HeadReduction::Mean => {
                    assert!(got.out[0].is_nan(), "{context}: {:?}", got.out);
                    assert!(
                        got.dw.iter().all(|v| v.is_nan()),
                        "{context}: dW not all NaN"
                    );
                }
                _ => {
                    for (r, v) in got.out.iter().enumerate() {
                        assert_eq!(v.is_nan(), r == 3, "{context}: row {r} = {v}");
                    }
                    assert_eq!(got.out[1], 0.0, "{context}: the ignored row");
                    let inputs = 8;
                    let row = |r: usize| &got.dx[r * inputs..(r + 1) * inputs];
                    assert!(row(3).iter().all(|v| v.is_nan()), "{context}: dX of row 3");
                    assert!(
                        row(0).iter().all(|v| v.is_finite()),
                        "{context}: dX of row 0"
                    );
                    assert!(
                        row(1).iter().all(|&v| v == 0.0),
                        "{context}: dX of the ignored row"
                    );
                }
            }
        }
    }
}

#[test]
fn every_row_ignored_gives_nan_for_the_mean_zero_for_the_sum_and_zero_gradients() {
    let device = &device();
    for classes in [5, 40] {
        let all: Vec<(usize, i64)> = (0..4).map(|r| (r, -100)).collect();
        let d = data(20, 4, 8, classes, &all);
        let mean = HeadOptions::new().with_ignore_index(Some(-100));
        let got = ours::<B>(device, &d, &mean, HeadActivation::Relu, &[1.0]);
        assert!(got.out[0].is_nan(), "C = {classes}: mean {:?}", got.out);
        for (name, g) in [("dX", &got.dx), ("dW", &got.dw), ("db", &got.db)] {
            assert!(g.iter().all(|&v| v == 0.0), "C = {classes}: mean's {name}");
        }
        let sum = mean.clone().with_reduction(HeadReduction::Sum);
        let got = ours::<B>(device, &d, &sum, HeadActivation::Relu, &[1.0]);
        assert_eq!(got.out, vec![0.0], "C = {classes}: sum");
        for (name, g) in [("dX", &got.dx), ("dW", &got.dw), ("db", &got.db)] {
            assert!(
                g.iter().all(|&v| v == 0.0),
                "C = {classes}: {name} of nothing"
            );
        }
    }
}

#[test]
fn leading_dims_give_the_rows_in_order() {
    let device = &device();
    let d = data(21, 6, 8, 40, &[(2, -100)]);
    let (x, w, b, labels) = d.tensors::<B>(device, DType::F32);
    let loss = HeadOptions::new()
        .with_ignore_index(Some(-100))
        .with_reduction(HeadReduction::None);
    let flat = fused_linear_cross_entropy(
        x.clone(),
        w.clone(),
        Some(b.clone()),
        labels.clone(),
        &with_loss(&loss, HeadActivation::Relu),
    );
    let x3 = x.reshape([2, 3, 8]);
    let labels2: Tensor<B, 2, Int> = labels.reshape([2, 3]);
    let nested = fused_linear_cross_entropy(
        x3,
        w,
        Some(b),
        labels2,
        &with_loss(&loss, HeadActivation::Relu),
    );
    assert_eq!(nested.dims(), [6]);
    assert_eq!(nested.into_data(), flat.into_data());
}

#[test]
#[should_panic(expected = "one per class")]
fn class_weights_of_the_wrong_length_are_refused() {
    let device = &device();
    let d = HeadData::random(22, 4, 8, 5);
    let (x, w, b, labels) = d.tensors::<B>(device, DType::F32);
    let loss = HeadOptions::new().with_class_weights(Some(vec![1.0; 4]));
    let _ = fused_linear_cross_entropy(
        x,
        w,
        Some(b),
        labels,
        &with_loss(&loss, HeadActivation::Relu),
    );
}

#[test]
fn the_module_takes_its_options() {
    let device = &device();
    let d = data(23, 9, 8, 40, &[(4, -100)]);
    let (x, w, b, labels) = d.tensors::<B>(device, DType::F32);
    let loss = HeadOptions::new()
        .with_ignore_index(Some(-100))
        .with_reduction(HeadReduction::Sum);
    let head = burn_fused_head::FusedLinearCrossEntropy {
        weight: burn::module::Param::from_tensor(w.clone()),
        bias: Some(burn::module::Param::from_tensor(b.clone())),
        options: loss.clone(),
    };
    let got = head.forward_loss(x.clone(), labels.clone());
    let want = fused_linear_cross_entropy(x, w, Some(b), labels, &loss);
    assert_eq!(got.into_data(), want.into_data());
}

/// The loss and the predictions under options that are not plain, on both paths and for
/// each reduction: the loss is `fused_linear_cross_entropy`'s bit for bit, tracked the same
/// way, and the predictions are those of the plain options (an ignored row is predicted as
/// any other).
#[test]
fn predictions_come_with_any_options() {
    let device = &device();
    for classes in [5, 40] {
        for reduction in [HeadReduction::Mean, HeadReduction::Sum, HeadReduction::None] {
            let d = data(25, 11, 8, classes, &[(3, -100)]);
            let loss = HeadOptions::new()
                .with_ignore_index(Some(-100))
                .with_class_weights(Some((0..classes).map(|k| 1.0 + (k % 3) as f32).collect()))
                .with_reduction(reduction);
            let context = format!("C = {classes}, {reduction:?}");
            let (x, w, b, labels) = d.tensors::<Autodiff<B>>(device, DType::F32);
            let w = w.require_grad();
            let run = |predict: bool| {
                let (x, w, b, labels) = (x.clone(), w.clone(), Some(b.clone()), labels.clone());
                let (out, predictions) = if predict {
                    let (out, p) = burn_fused_head::fused_linear_cross_entropy_and_predictions(
                        x,
                        w.clone(),
                        b,
                        labels,
                        &loss,
                    );
                    (out, Some(p))
                } else {
                    (
                        fused_linear_cross_entropy(x, w.clone(), b, labels, &loss),
                        None,
                    )
                };
                let dw = w.grad(&out.clone().sum().backward()).unwrap();
                (out.into_data(), dw.into_data(), predictions)
            };
            let (out, dw, predictions) = run(true);
            let (want_out, want_dw, _) = run(false);
            assert_eq!(out, want_out, "{context}: result");
            assert_eq!(dw, want_dw, "{context}: dW");
            let (_, plain) = burn_fused_head::fused_linear_cross_entropy_and_predictions(
                x.clone(),
                w.clone(),
                Some(b.clone()),
                labels.clone().mask_fill(labels.clone().equal_elem(-100), 0),
                &HeadOptions::new(),
            );
            assert_eq!(
                predictions.unwrap().into_data(),
                plain.into_data(),
                "{context}: predictions"
            );
        }
    }
}

/// 24 random cases of shape, options and chunking against PyTorch's formula, both activations.
#[test]
fn random_options_match_pytorch() {
    let device = &device();
    let mut rng = Rng(2026);
    for case in 0..24 {
        let (data, loss, chunk) = random_case(&mut rng);
        let context = format!(
            "case {case}: B = {}, I = {}, C = {}, chunk {chunk}, {loss:?}",
            data.batch, data.inputs, data.classes
        );
        check::<B>(device, &context, &data, &loss, chunk);
    }
}

/// `head_sum` (the options' mean and denominator) adds in the pairwise order written out on
/// the host, bit for bit, at lengths with odd levels, below, at and above a cube of 256
/// units, and with a NaN (which carries).
#[test]
fn head_sum_is_the_pairwise_order_bit_for_bit() {
    use burn::tensor::TensorPrimitive;
    let device = &device();
    let head_sum = |v: Vec<f32>| {
        let n = v.len();
        let t = Tensor::<B, 1>::from_data(TensorData::new(v, [n]), (device, DType::F32));
        let sum = B::head_sum(t.into_primitive().tensor());
        let sum = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(sum));
        sum.into_data().convert::<f32>().to_vec::<f32>().unwrap()
    };
    for n in [0usize, 1, 2, 3, 7, 255, 256, 257, 1000, 8193] {
        // Magnitudes from 1e-4 to 1e4: the sum depends on the order.
        let mut v: Vec<f32> = (0..n)
            .map(|k| ((k * 7919 % 997) as f32 - 498.0) * 10f32.powi((k % 9) as i32 - 4))
            .collect();
        let want = common::pairwise_tree(v.clone());
        let got = head_sum(v.clone());
        assert_eq!(got.len(), 1, "n = {n}");
        assert_eq!(
            got[0].to_bits(),
            want.to_bits(),
            "n = {n}: {} against {want}",
            got[0]
        );
        if n > 3 {
            v[n / 3] = f32::NAN;
            let got = head_sum(v);
            assert!(got[0].is_nan(), "n = {n}: a NaN gives {}", got[0]);
        }
    }
}
