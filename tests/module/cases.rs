/// 120 SGD steps on one batch of learnable labels: the loss must fall to under half its first
/// value, and W must have moved.
#[test]
fn trains_with_an_optimizer_behind_a_stock_linear() {
    type B = burn::backend::Autodiff<self::B>;
    let device = &device();
    let data = teacher_data(64, 8, 4);
    let (x, _, _, labels) = data.tensors::<B>(device, DType::F32);
    let mut model = Mlp::<B>::new(device);
    let before = model.head.weight.val().into_data();
    let mut optim = SgdConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..120 {
        let loss = model.loss(x.clone(), labels.clone());
        losses.push(
            loss.clone()
                .into_scalar()
                .to_string()
                .parse::<f64>()
                .unwrap(),
        );
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(0.5, model, grads);
    }
    let (first, last) = (losses[0], *losses.last().unwrap());
    assert!(
        losses.iter().all(|l| l.is_finite()),
        "non-finite loss: {losses:?}"
    );
    assert!(last < 0.5 * first, "loss did not fall: {first} -> {last}");
    assert_ne!(
        model.head.weight.val().into_data(),
        before,
        "W did not move"
    );
}

/// Save to bytes, load into a fresh module: the same logits, bit for bit.
#[test]
fn a_record_round_trip_keeps_the_logits() {
    let device = &device();
    let data = HeadData::random(9, 6, 16, 5);
    let (x, _, _, _) = data.tensors::<B>(device, DType::F32);
    let head = FusedLinearCrossEntropyConfig::new(16, 5).init::<B>(device);
    let expected = head.forward(x.clone()).into_data();
    assert!(
        expected.iter::<f32>().any(|v| v != 0.0),
        "degenerate logits"
    );
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = recorder.record(head.into_record(), ()).unwrap();
    let loaded = FusedLinearCrossEntropyConfig::new(16, 5)
        .init::<B>(device)
        .load_record(recorder.load(bytes, device).unwrap());
    assert_eq!(expected, loaded.forward(x).into_data());
}

/// The config's defaults are `LinearConfig`'s and `Linear` + `CrossEntropyLoss`'s (a bias,
/// the identity, exact, the mean), each setter reaches the module's options (which are not
/// part of the record), and the module's loss is the function's with those options, bit for
/// bit.
#[test]
fn the_configs_options_reach_the_loss() {
    let device = &device();
    let config = FusedLinearCrossEntropyConfig::new(16, 40);
    assert!(config.bias && config.bias_initializer.is_none());
    assert_eq!(
        config.initializer,
        burn::nn::LinearConfig::new(16, 40).initializer
    );
    assert_eq!(config.options, HeadOptions::new());
    assert_eq!(config.options.activation, HeadActivation::Identity);
    let config = config
        .with_activation(HeadActivation::Relu)
        .with_precision(HeadPrecision::Tf32)
        .with_ignore_index(Some(3))
        .with_pad_tokens(Some(vec![5]))
        .with_class_weights(Some(vec![0.5; 40]))
        .with_smoothing(Some(0.25))
        .with_reduction(burn_fused_head::HeadReduction::Sum)
        .with_chunk_elements(Some(100));
    let options = HeadOptions::new()
        .with_activation(HeadActivation::Relu)
        .with_precision(HeadPrecision::Tf32)
        .with_ignore_index(Some(3))
        .with_pad_tokens(Some(vec![5]))
        .with_class_weights(Some(vec![0.5; 40]))
        .with_smoothing(Some(0.25))
        .with_reduction(burn_fused_head::HeadReduction::Sum)
        .with_chunk_elements(Some(100));
    assert_eq!(config.options, options);
    let data = HeadData::random(10, 24, 16, 40);
    let (x, _, _, labels) = data.tensors::<B>(device, DType::F32);
    let head = config.init::<B>(device);
    assert_eq!(head.options, options);
    let want = fused_linear_cross_entropy(
        x.clone(),
        head.weight.val(),
        head.bias.as_ref().map(|b| b.val()),
        labels.clone(),
        &options,
    );
    assert_eq!(head.forward_loss(x, labels).into_data(), want.into_data());
    let record = head.clone().into_record();
    let plain = FusedLinearCrossEntropyConfig::new(16, 40)
        .init::<B>(device)
        .load_record(record);
    assert_eq!(
        plain.options,
        HeadOptions::new(),
        "a record carries no options"
    );
}

/// A head made from a stock `Linear` (its weight `[I, C]` transposed to `[C, I]`, its bias
/// kept, in either `LinearLayout`) holds the layer's parameters, and its logits, loss and dW
/// are the layer's `Linear` + cross-entropy under the gates: against the same layer computed
/// in f64 on NdArray (stock Burn on CUDA is no reference: its autotuned f32 matmul may run on
/// TF32). A layer without a bias gives a head without one.
#[test]
fn a_head_from_a_linear_is_that_linear() {
    use burn::nn::{LinearConfig, LinearLayout};
    use burn_fused_head_testing::gates::{gate, values};
    type A = burn::backend::Autodiff<B>;
    type R = burn::backend::Autodiff<burn::backend::NdArray<f64>>;
    let device = &device();
    let reference = &burn::backend::ndarray::NdArrayDevice::Cpu;
    let to_reference = |v: Vec<f64>, shape: Vec<usize>| {
        let data = burn::tensor::TensorData::new(v, shape);
        Tensor::<R, 2>::from_data(data, (reference, DType::F64))
    };
    for (layout, bias, classes) in [
        (LinearLayout::Row, true, 7),
        (LinearLayout::Col, true, 40),
        (LinearLayout::Row, false, 40),
    ] {
        let context = format!("{layout:?}, bias {bias}, C = {classes}");
        let data = HeadData::random(31, 12, 9, classes);
        let (x, _, _, labels) = data.tensors::<A>(device, DType::F32);
        let linear: Linear<A> = LinearConfig::new(9, classes)
            .with_layout(layout)
            .with_bias(bias)
            .init(device);
        let weight = values(linear.weight.val()); // [I, C]
        let bias_values = linear.bias.as_ref().map(|b| values(b.val())); // [C]

        // The layer in f64: logits = X W + b, loss = mean_r -log_softmax(logits)[r, y_r].
        let x64 = to_reference(values(x.clone()), vec![12, 9]);
        let w64 = to_reference(weight.clone(), vec![9, classes]).require_grad();
        let mut logits64 = x64.matmul(w64.clone()); // [B, C]
        if let Some(b) = &bias_values {
            logits64 = logits64 + to_reference(b.clone(), vec![1, classes]);
        }
        let targets = Tensor::<R, 1, burn::tensor::Int>::from_data(
            burn::tensor::TensorData::new(data.labels.clone(), [12]),
            (reference, DType::I64),
        )
        .unsqueeze_dim::<2>(1); // [B, 1]
        let log_p = burn::tensor::activation::log_softmax(logits64.clone(), 1);
        let loss64 = log_p.gather(1, targets).mean().neg(); // [1]
        let dw64 = values(w64.grad(&loss64.backward()).unwrap().transpose()); // [C, I]

        let head = FusedLinearCrossEntropy::from(linear);
        assert_eq!(head.weight.dims(), [classes, 9], "{context}");
        assert_eq!(head.bias.is_some(), bias, "{context}");
        assert_eq!(
            values(head.weight.val().transpose()),
            weight,
            "{context}: W is the layer's weight, transposed"
        );
        if let Some(b) = bias_values {
            assert_eq!(values(head.bias.as_ref().unwrap().val()), b, "{context}: b");
        }
        let loss = head.forward_loss(x.clone(), labels);
        let grads = loss.backward();
        for report in [
            gate("logits", &values(head.forward(x)), &values(logits64)),
            gate("loss", &values(loss), &values(loss64)),
            gate("dW", &values(head.weight.grad(&grads).unwrap()), &dw64),
        ] {
            assert!(report.passed(), "{context}: {report}");
        }
    }
}

/// A head without a bias is the head with a zero bias, bit for bit, and the gradients of X and
/// W are those of that head.
#[test]
fn a_head_without_a_bias_is_a_zero_bias() {
    type A = burn::backend::Autodiff<B>;
    let device = &device();
    for classes in [7, 40] {
        let data = HeadData::random(33, 10, 6, classes);
        let (x, w, _, labels) = data.tensors::<A>(device, DType::F32);
        let zeros = Tensor::<A, 1>::zeros([classes], (device, DType::F32));
        let run = |bias: Option<Tensor<A, 1>>| {
            let (x, w) = (x.clone().require_grad(), w.clone().require_grad());
            let options = HeadOptions::new().with_activation(HeadActivation::Relu);
            let loss =
                fused_linear_cross_entropy(x.clone(), w.clone(), bias, labels.clone(), &options);
            let grads = loss.backward();
            (
                loss.into_data(),
                x.grad(&grads).unwrap().into_data(),
                w.grad(&grads).unwrap().into_data(),
            )
        };
        assert_eq!(run(None), run(Some(zeros)), "C = {classes}");
        let head = FusedLinearCrossEntropyConfig::new(6, classes)
            .with_bias(false)
            .init::<A>(device);
        assert!(head.bias.is_none());
        let loss = head.forward_loss(x.clone(), labels.clone());
        assert!(
            head.weight.grad(&loss.backward()).is_some(),
            "C = {classes}"
        );
    }
}

/// X `[2, 3, I]` with labels `[2, 3]`, as a sequence model gives them: the loss and the logits
/// of the six flattened rows, bit for bit, and dX in X's shape with the flattened call's
/// values; on both paths (C = 7 and C = 40). Labels of other leading dims panic.
#[test]
fn leading_dims_are_the_flattened_rows() {
    type A = burn::backend::Autodiff<B>;
    let device = &device();
    for classes in [7, 40] {
        let data = HeadData::random(71, 6, 5, classes);
        let (x, w, b, labels) = data.tensors::<A>(device, DType::F32);
        let head = exact_head(w, b, HeadActivation::Relu);
        let x = x.require_grad();
        let flat = head.forward_loss(x.clone(), labels.clone());
        let dx_flat = x.grad(&flat.backward()).unwrap().into_data();

        let x3 = Tensor::<A, 3>::from_data(
            burn::tensor::TensorData::new(data.x.clone(), [2, 3, 5]),
            (device, DType::F32),
        )
        .require_grad();
        let loss = head.forward_loss(x3.clone(), labels.clone().reshape([2, 3]));
        assert_eq!(
            loss.clone().into_data(),
            flat.into_data(),
            "C = {classes}: loss"
        );
        let dx = x3.grad(&loss.backward()).unwrap();
        assert_eq!(dx.dims(), [2, 3, 5], "C = {classes}: dX keeps X's shape");
        assert_eq!(dx.reshape([6, 5]).into_data(), dx_flat, "C = {classes}: dX");

        let logits = head.forward(x3.clone().detach());
        assert_eq!(logits.dims(), [2, 3, classes]);
        let (x2, _, _, _) = data.tensors::<A>(device, DType::F32);
        assert_eq!(
            logits.reshape([6, classes]).into_data(),
            head.forward(x2).into_data(),
            "C = {classes}: logits"
        );

        let wrong = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            head.forward_loss(x3.clone(), labels.clone().reshape([3, 2]))
        }));
        let message = wrong.expect_err("labels [3, 2] for X [2, 3, 5] must panic");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(text.contains("leading dims of X"), "{text}");
    }
}

/// A ReLU head on the README's hidden layer (Linear 784 -> 256, ReLU), initialised as
/// `HeadActivation::Relu` recommends (b = 1), on 32 random rows, trained by Adam on the hidden
/// layer's output: no row starts with every logit <= 0 (a ReLU-dead row learns nothing), and
/// after 200 steps the loss is within 25% of stock `Linear` + `CrossEntropyLoss` trained from
/// the same W and b. (With Burn's `Linear` init for b, 2 rows died and the loss stayed at 0.60
/// against stock's 0.10.)
#[test]
fn the_relu_heads_bias_of_one_lets_every_row_learn() {
    use burn::nn::{LinearConfig, Relu};
    use burn::optim::AdamConfig;
    use burn::tensor::ElementConversion;
    type A = burn::backend::Autodiff<B>;
    let device = &device();
    let hidden: Linear<A> = LinearConfig::new(784, 256).init(device);
    let mut head = FusedLinearCrossEntropyConfig::new(256, 10)
        .with_activation(HeadActivation::Relu)
        .with_bias_initializer(Some(burn::module::Initializer::Constant { value: 1.0 }))
        .init::<A>(device);
    let x = seeded_uniform::<A, 2>(81, [32, 784], 1.7, device); // variance ~1, as N(0, 1)
    let labels = Tensor::<A, 1, burn::tensor::Int>::arange(0..32, device).remainder_scalar(10);
    let features = Relu::new().forward(hidden.forward(x)).detach(); // [32, 256]
    let dead = |head: &FusedLinearCrossEntropy<A>| {
        let z = features.clone().matmul(head.weight.val().transpose())
            + head.bias.as_ref().unwrap().val().unsqueeze();
        let alive = z.greater_elem(0.0).int().sum_dim(1); // [32, 1]
        alive.equal_elem(0).int().sum().into_scalar().elem::<i64>()
    };
    assert_eq!(dead(&head), 0, "rows with every logit <= 0 at the start");
    let head0 = head.clone();
    let mut optim = AdamConfig::new().init();
    let mut loss = f64::NAN;
    for _ in 0..200 {
        let l = head.forward_loss(features.clone(), labels.clone());
        loss = l.clone().into_scalar().elem::<f64>();
        let grads = GradientsParams::from_grads(l.backward(), &head);
        head = optim.step(1e-3, head, grads);
    }
    // Stock Linear + CrossEntropyLoss from the same W, b on the same features.
    let mut stock = Linear {
        weight: Param::from_tensor(Tensor::from_data(
            head0.weight.val().transpose().into_data(),
            device,
        )),
        bias: Some(Param::from_tensor(Tensor::from_data(
            head0.bias.as_ref().unwrap().val().into_data(),
            device,
        ))),
    };
    let ce = burn::nn::loss::CrossEntropyLossConfig::new().init(device);
    let mut optim = AdamConfig::new().init();
    let mut stock_loss = f64::NAN;
    for _ in 0..200 {
        let l = ce.forward(stock.forward(features.clone()), labels.clone());
        stock_loss = l.clone().into_scalar().elem::<f64>();
        let grads = GradientsParams::from_grads(l.backward(), &stock);
        stock = optim.step(1e-3, stock, grads);
    }
    assert!(
        loss <= 1.25 * stock_loss + 1e-3,
        "loss after 200 Adam steps: {loss}, stock's {stock_loss} (dead rows now: {})",
        dead(&head)
    );
}

/// The identity head (the default) is stock `Linear` +
/// `CrossEntropyLoss`: the README's model's head (I = 256) on 32 random rows, at C = 10 and at
/// C = 40 (the large-C path), trained by Adam from the same W and b as a stock `Linear` trained
/// on the f64 reference (NdArray, stock ops, the same features): the first loss and gradients
/// under the gate, and the loss after 100 steps within 1e-4 of the reference's (f32
/// rounding alone; both fall by more than half). The reference is f64 rather than stock Burn on
/// the same backend: on CUDA stock's autotuned matmul is not exact f32. Its cross-entropy is
/// written with `log_softmax` and `gather`, every tensor with an explicit dtype, so that no
/// default dtype of NdArray's device type is read or fixed (the NdArray f32 backend under test
/// shares it).
#[test]
fn the_identity_head_trains_as_stock_linear_cross_entropy() {
    use burn::nn::Relu;
    use burn::optim::AdamConfig;
    use burn::tensor::ElementConversion;
    use burn_fused_head_testing::gates::{gate, values};
    type A = burn::backend::Autodiff<B>;
    type R = burn::backend::Autodiff<burn::backend::NdArray<f64>>;
    let device = &device();
    let reference = &burn::backend::ndarray::NdArrayDevice::Cpu;
    // `data` (any float dtype) as an f64 tensor on the reference.
    let to_reference = |data: burn::tensor::TensorData| {
        Tensor::<R, 2>::from_data(data.convert::<f64>(), (reference, DType::F64))
    };
    for classes in [10, 40] {
        let hidden = Linear::<A> {
            weight: Param::from_tensor(seeded_uniform(92, [784, 256], 1.0 / 28.0, device)),
            bias: Some(Param::from_tensor(seeded_uniform(
                93,
                [256],
                1.0 / 28.0,
                device,
            ))),
        };
        let x = seeded_uniform::<A, 2>(91, [32, 784], 1.7, device);
        let labels = Tensor::<A, 1, burn::tensor::Int>::arange(0..32, device)
            .remainder_scalar(classes as i64);
        let features = Relu::new().forward(hidden.forward(x)).detach(); // [32, 256]
        // Explicit f32 values (Burn's initializers take the device's default dtype).
        let mut head = FusedLinearCrossEntropy::<A> {
            weight: Param::from_tensor(seeded_uniform(94, [classes, 256], 1.0 / 16.0, device)),
            bias: Some(Param::from_tensor(Tensor::ones(
                [classes],
                (device, DType::F32),
            ))),
            options: HeadOptions::new(),
        };

        let ref_features = to_reference(features.clone().into_data()); // [32, 256]
        let ref_labels = Tensor::<R, 1, burn::tensor::Int>::from_data(
            labels.clone().into_data().convert::<i64>(),
            (reference, DType::I64),
        )
        .unsqueeze_dim::<2>(1); // [32, 1]
        let ref_bias = head
            .bias
            .as_ref()
            .unwrap()
            .val()
            .into_data()
            .convert::<f64>();
        let mut stock = Linear {
            weight: Param::from_tensor(to_reference(head.weight.val().transpose().into_data())),
            bias: Some(Param::from_tensor(Tensor::<R, 1>::from_data(
                ref_bias,
                (reference, DType::F64),
            ))),
        };
        let ce = |logits: Tensor<R, 2>| {
            let log_p = burn::tensor::activation::log_softmax(logits, 1); // [32, C]
            log_p.gather(1, ref_labels.clone()).mean().neg() // [1]
        };
        let (mut optim, mut stock_optim) = (AdamConfig::new().init(), AdamConfig::new().init());
        let mut losses = Vec::new();
        for step in 0..100 {
            let l = head.forward_loss(features.clone(), labels.clone());
            let s = ce(stock.forward(ref_features.clone()));
            losses.push((
                l.clone().into_scalar().elem::<f64>(),
                s.clone().into_scalar().elem::<f64>(),
            ));
            let (grads, stock_grads) = (l.backward(), s.backward());
            if step == 0 {
                let dw = values(head.weight.grad(&grads).unwrap());
                let stock_dw = values(stock.weight.grad(&stock_grads).unwrap().transpose());
                let db = values(head.bias.as_ref().unwrap().grad(&grads).unwrap());
                let stock_db = values(stock.bias.as_ref().unwrap().grad(&stock_grads).unwrap());
                let (loss, stock_loss) = losses[0];
                for report in [
                    gate("loss", &[loss], &[stock_loss]),
                    gate("dW", &dw, &stock_dw),
                    gate("db", &db, &stock_db),
                ] {
                    assert!(report.passed(), "C = {classes}, first step: {report}");
                }
            }
            let grads = GradientsParams::from_grads(grads, &head);
            head = optim.step(1e-3, head, grads);
            let stock_grads = GradientsParams::from_grads(stock_grads, &stock);
            stock = stock_optim.step(1e-3, stock, stock_grads);
        }
        let (first, last) = (losses[0].0, losses[99]);
        eprintln!(
            "C = {classes}: loss {first} -> {} (f64 stock {}, relative difference {:.1e})",
            last.0,
            last.1,
            (last.0 - last.1).abs() / last.1
        );
        assert!(
            (last.0 - last.1).abs() <= 1e-4 * last.1,
            "C = {classes}: after 100 steps {} against the f64 stock's {}",
            last.0,
            last.1
        );
        assert!(
            last.0 < 0.5 * first,
            "C = {classes}: loss did not fall: {losses:?}"
        );
    }
}

/// `forward_loss_and_predictions` on X `[2, 3, I]` with targets `[2, 3]`: the loss of
/// `forward_loss` bit for bit, predictions in the targets' shape equal to the flattened
/// call's, both activations, on both paths (C = 7 and C = 40).
#[test]
fn forward_loss_and_predictions_keeps_the_targets_shape() {
    let device = &device();
    for classes in [7, 40] {
        for activation in [HeadActivation::Relu, HeadActivation::Identity] {
            let data = HeadData::random(73, 6, 5, classes);
            let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
            let head = exact_head(w, b, activation);
            let context = format!("C = {classes}, {activation:?}");
            let (flat_loss, flat) = head.forward_loss_and_predictions(x.clone(), labels.clone());
            let x3 = x.clone().reshape([2, 3, 5]);
            let labels3 = labels.clone().reshape([2, 3]);
            let (loss, predictions) =
                head.forward_loss_and_predictions(x3.clone(), labels3.clone());
            assert_eq!(predictions.dims(), [2, 3], "{context}: shape");
            assert_eq!(
                predictions.reshape([6]).into_data(),
                flat.into_data(),
                "{context}: predictions"
            );
            assert_eq!(
                loss.into_data(),
                head.forward_loss(x3, labels3).into_data(),
                "{context}: loss"
            );
            assert_eq!(
                flat_loss.into_data(),
                head.forward_loss(x, labels).into_data(),
                "{context}: flat loss"
            );
        }
    }
}

/// `forward_classification` (feature `train`): burn-train's `ClassificationOutput` whose loss
/// is `forward_loss`'s bit for bit, whose output `[B, C]` is the one-hot of
/// `forward_loss_and_predictions`' classes (so its argmax, what `AccuracyMetric` reads, is the
/// prediction), and whose targets are the labels; on both paths (C = 7 and C = 40).
#[cfg(feature = "train")]
#[test]
fn forward_classification_is_the_loss_and_the_one_hot_predictions() {
    let device = &device();
    for classes in [7, 40] {
        let data = HeadData::random(29, 9, 5, classes);
        let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
        let head = exact_head(w, b, HeadActivation::Relu);
        let out = head.forward_classification(x.clone(), labels.clone());
        let (loss, predictions) = head.forward_loss_and_predictions(x, labels.clone());
        assert_eq!(
            out.loss.into_data(),
            loss.into_data(),
            "C = {classes}: loss"
        );
        assert_eq!(
            out.output.dims(),
            [9, classes],
            "C = {classes}: output shape"
        );
        let want = predictions.clone().one_hot::<2>(classes).float();
        assert_eq!(
            out.output.clone().into_data().convert::<f32>(),
            want.into_data().convert::<f32>(),
            "C = {classes}: output"
        );
        assert_eq!(
            out.output
                .argmax(1)
                .squeeze_dim::<1>(1)
                .into_data()
                .convert::<i64>(),
            predictions.into_data().convert::<i64>(),
            "C = {classes}: argmax"
        );
        assert_eq!(
            out.targets.into_data(),
            labels.into_data(),
            "C = {classes}: targets"
        );
    }
}

/// `forward_classification` on an empty batch: an output `[0, C]` made without a kernel (a
/// fill of zero cubes breaks CUDA's device), empty targets, the NaN loss of a mean over nothing.
#[cfg(feature = "train")]
#[test]
fn forward_classification_of_an_empty_batch() {
    let device = &device();
    let data = HeadData::random(29, 0, 5, 7);
    let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
    let head = exact_head(w, b, HeadActivation::Relu);
    let out = head.forward_classification(x, labels);
    assert_eq!(out.output.dims(), [0, 7]);
    assert_eq!(out.targets.dims(), [0]);
    let loss = out
        .loss
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .unwrap();
    assert!(loss.len() == 1 && loss[0].is_nan(), "{loss:?}");
}

/// An exact-precision head with W and b as its parameters and `activation`.
fn exact_head<K: Backend>(
    w: Tensor<K, 2>,
    b: Tensor<K, 1>,
    activation: HeadActivation,
) -> FusedLinearCrossEntropy<K> {
    FusedLinearCrossEntropy {
        weight: Param::from_tensor(w),
        bias: Some(Param::from_tensor(b)),
        options: HeadOptions::new().with_activation(activation),
    }
}

/// `forward` under autodiff: the inner backend's logits bit for bit (the op's kernels in the
/// head's precision, not stock ops), and the gradients of `sum(H V)` those of the same ReLU
/// layer in f64 on NdArray; small and large C.
#[test]
fn forward_under_autodiff_is_the_kernels_logits_and_their_gradients() {
    use burn_fused_head_testing::gates::{gate, values};
    type A = burn::backend::Autodiff<B>;
    type R = burn::backend::Autodiff<burn::backend::NdArray<f64>>;
    let device = &device();
    let reference = &burn::backend::ndarray::NdArrayDevice::Cpu;
    for classes in [9, 40] {
        let data = HeadData::random(37, 11, 7, classes);
        let v: Vec<f32> = (0..11 * classes)
            .map(|k| ((k % 5) as f32 - 2.0) * 0.5)
            .collect();
        let (x, w, b, _) = data.tensors::<A>(device, DType::F32);
        let head = exact_head(w.clone(), b.clone(), HeadActivation::Relu);
        let x = x.require_grad();
        let h = head.forward(x.clone()); // [B, C]
        let (xi, wi, bi, _) = data.tensors::<B>(device, DType::F32);
        let inner = exact_head(wi, bi, HeadActivation::Relu).forward(xi);
        assert_eq!(
            h.clone().inner().into_data(),
            inner.into_data(),
            "C = {classes}: H"
        );
        let vt = Tensor::<A, 2>::from_data(
            burn::tensor::TensorData::new(v.clone(), [11, classes]),
            (device, DType::F32),
        );
        let grads = (h * vt).sum().backward();
        let (got_dx, got_dw) = (
            values(x.grad(&grads).unwrap()),
            values(head.weight.grad(&grads).unwrap()),
        );
        let got_db = values(head.bias.as_ref().unwrap().grad(&grads).unwrap());
        // The same in f64.
        let (x, w, b, _) = data.tensors::<R>(reference, DType::F64);
        let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
        let z = x.clone().matmul(w.clone().transpose()) + b.clone().unsqueeze_dim(0);
        let h = z.clone().mask_fill(z.lower_equal_elem(0.0), 0.0);
        let vt = Tensor::<R, 2>::from_data(
            burn::tensor::TensorData::new(v, [11, classes]).convert::<f64>(),
            (reference, DType::F64),
        );
        let grads = (h * vt).sum().backward();
        for report in [
            gate("dX", &got_dx, &values(x.grad(&grads).unwrap())),
            gate("dW", &got_dw, &values(w.grad(&grads).unwrap())),
            gate("db", &got_db, &values(b.grad(&grads).unwrap())),
        ] {
            assert!(report.passed(), "C = {classes}: {report}");
        }
    }
}
