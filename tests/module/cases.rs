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
    let head = FusedHeadConfig::new(16, 5).init::<B>(device);
    let expected = head.logits(x.clone()).into_data();
    assert!(
        expected.iter::<f32>().any(|v| v != 0.0),
        "degenerate logits"
    );
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = recorder.record(head.into_record(), ()).unwrap();
    let loaded = FusedHeadConfig::new(16, 5)
        .init::<B>(device)
        .load_record(recorder.load(bytes, device).unwrap());
    assert_eq!(expected, loaded.logits(x).into_data());
}

/// The config's precision reaches the module (default exact; not part of the record) and its
/// loss is the function's with that precision, bit for bit.
#[test]
fn the_configs_precision_reaches_the_loss() {
    let device = &device();
    assert_eq!(FusedHeadConfig::new(16, 40).precision, HeadPrecision::Exact);
    let data = HeadData::random(10, 24, 16, 40);
    let (x, _, _, labels) = data.tensors::<B>(device, DType::F32);
    let head = FusedHeadConfig::new(16, 40)
        .with_precision(HeadPrecision::Tf32)
        .init::<B>(device);
    assert_eq!(head.precision, HeadPrecision::Tf32);
    let want = burn_fused_head::linear_relu_cross_entropy_with(
        x.clone(),
        head.weight.val(),
        head.bias.val(),
        labels.clone(),
        HeadPrecision::Tf32,
    );
    assert_eq!(head.forward(x, labels).into_data(), want.into_data());
    let record = head.clone().into_record();
    let exact = FusedHeadConfig::new(16, 40)
        .init::<B>(device)
        .load_record(record);
    assert_eq!(
        exact.precision,
        HeadPrecision::Exact,
        "a record carries no precision"
    );
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
        let head = FusedHead {
            weight: Param::from_tensor(w),
            bias: Param::from_tensor(b),
            precision: HeadPrecision::Exact,
        };
        let x = x.require_grad();
        let flat = head.forward(x.clone(), labels.clone());
        let dx_flat = x.grad(&flat.backward()).unwrap().into_data();

        let x3 = Tensor::<A, 3>::from_data(
            burn::tensor::TensorData::new(data.x.clone(), [2, 3, 5]),
            (device, DType::F32),
        )
        .require_grad();
        let loss = head.forward(x3.clone(), labels.clone().reshape([2, 3]));
        assert_eq!(
            loss.clone().into_data(),
            flat.into_data(),
            "C = {classes}: loss"
        );
        let dx = x3.grad(&loss.backward()).unwrap();
        assert_eq!(dx.dims(), [2, 3, 5], "C = {classes}: dX keeps X's shape");
        assert_eq!(dx.reshape([6, 5]).into_data(), dx_flat, "C = {classes}: dX");

        let logits = head.logits(x3.clone().detach());
        assert_eq!(logits.dims(), [2, 3, classes]);
        let (x2, _, _, _) = data.tensors::<A>(device, DType::F32);
        assert_eq!(
            logits.reshape([6, classes]).into_data(),
            head.logits(x2).into_data(),
            "C = {classes}: logits"
        );

        let wrong = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            head.forward(x3.clone(), labels.clone().reshape([3, 2]))
        }));
        let message = wrong.expect_err("labels [3, 2] for X [2, 3, 5] must panic");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(text.contains("leading dims of X"), "{text}");
    }
}
