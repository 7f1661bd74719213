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
