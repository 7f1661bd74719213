/// Shape mismatches are refused before anything runs, naming the shapes.
#[test]
fn mismatched_shapes_are_refused_naming_them() {
    let device = device();
    // (B, I of X, I of W, C of W, length of b, length of labels)
    let tensors = move |[b, i, wi, c, bc, nl]: [usize; 6]| {
        let f = |shape: [usize; 2]| Tensor::<B, 2>::zeros(shape, (&device, DType::F32));
        let labels = Tensor::<B, 1, Int>::zeros([nl], &device);
        (
            f([b, i]),
            f([c, wi]),
            Tensor::<B, 1>::zeros([bc], (&device, DType::F32)),
            labels,
        )
    };
    let cases = [
        ([4, 3, 5, 2, 2, 4], "their I differ (3 vs 5)"),
        ([4, 3, 3, 2, 7, 4], "b must be [C] = [2]"),
        ([4, 3, 3, 2, 2, 5], "labels must be [B] = [4]"),
        ([4, 3, 3, 0, 0, 4], "C = 0 classes"),
    ];
    for (dims, expected) in cases {
        let (x, w, bias, labels) = tensors(dims);
        let msg = panic_message(move || {
            fused_linear_cross_entropy(x, w, Some(bias), labels, &relu_options());
        });
        assert!(
            msg.contains(expected),
            "message {msg:?} should contain {expected:?}"
        );
    }
}

/// A label outside [0, C) gives a NaN loss for its row (so a NaN mean and NaN gradients), never
/// an out-of-bounds access; `validate_labels` reports it as an error.
#[test]
fn a_label_out_of_range_gives_nan_never_a_bad_index() {
    let device = &device();
    for bad in [-1i64, 5, i32::MAX as i64] {
        let mut data = HeadData::random(43, 6, 4, 5);
        data.labels[2] = bad;
        let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
        let err = validate_targets(&labels, 5, None).expect_err("a bad label");
        assert_eq!((err.index, err.target, err.count), (2, bad, 1));
        let got = run_stages(x, w, b, labels, 1.0);
        let want = reference_stages(&data, 1.0);
        assert!(
            got.loss_rows[2].is_nan() && got.loss.is_nan(),
            "label {bad}: loss {:?}",
            got.loss_rows
        );
        assert!(
            got.dh[10..15].iter().all(|v| v.is_nan()),
            "label {bad}: dH row not NaN"
        );
        assert_gates(&format!("label {bad}"), &got.gates(&want)); // NaN where the reference has NaN
        assert!(
            got.dw.iter().any(|v| v.is_nan()),
            "label {bad}: dW should carry the NaN"
        );
    }
}

/// B = 0: the mean over nothing is NaN (as PyTorch); the gradients are zero (dW, db) or empty.
#[test]
fn an_empty_batch_gives_nan_loss_and_zero_gradients() {
    let device = &device();
    let data = HeadData::random(47, 0, 4, 3);
    let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
    let (x, w, b) = (x.require_grad(), w.require_grad(), b.require_grad());
    let loss = fused_linear_cross_entropy(
        x.clone(),
        w.clone(),
        Some(b.clone()),
        labels,
        &relu_options(),
    );
    let grads = loss.backward();
    assert!(to_f64(loss)[0].is_nan());
    // dX is empty: [0, I] (its reading back is checked with every subset tracked, below).
    assert_eq!(x.grad(&grads).unwrap().dims(), [0, 4]);
    let (dw, db) = (
        to_f64(w.grad(&grads).unwrap()),
        to_f64(b.grad(&grads).unwrap()),
    );
    assert!(
        dw.iter().chain(&db).all(|v| *v == 0.0),
        "dW {dw:?}, db {db:?}"
    );
}

/// NaN or infinity in X, W or b: NaN loss, NaN in the gradients, no hang.
#[test]
fn nan_and_infinity_reach_the_loss_and_gradients() {
    let device = &device();
    for (what, value) in [
        ("X", f32::NAN),
        ("W", f32::NAN),
        ("b", f32::NAN),
        ("X", f32::INFINITY),
        ("W", f32::NEG_INFINITY),
    ] {
        let mut data = HeadData::random(53, 5, 4, 3);
        match what {
            "X" => data.x[1] = value,
            "W" => data.weight.iter_mut().for_each(|v| *v = value),
            _ => data.bias[0] = value,
        }
        let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
        let got = head_grads(x, w, b, labels, 1.0, relu_loss);
        assert!(got.loss.is_nan(), "{what} = {value}: loss {}", got.loss);
        assert!(
            got.dw.iter().chain(&got.db).any(|v| v.is_nan()),
            "{what} = {value}: no NaN in dW, db"
        );
    }
}

/// |H| up to 1e30: the stable softmax keeps the loss finite and matches the f64 reference.
/// W is a power of two times small integers, so Z is exact in f32.
///
/// Every gate but dX must pass. dX = dZ W sums terms of magnitude 1e28 whose exact sum is often
/// 0 (tied logits with equal W columns): f32's rounding of p (1e-8 relative) then leaves
/// |dX| ~ 1e20 where f64 leaves 0, in any f32 implementation, stock Burn's included. So dX is
/// held to the dot-product bound instead: `|got - ref| <= 2e-5 + 2e-4 |ref| + 1e-6 sum_c |dZ W|`.
#[test]
fn logits_near_1e30_pass_the_gates() {
    let device = &device();
    let mut data = HeadData::random(59, 9, 6, 5);
    let scale = 2f32.powi(96); // about 7.9e28
    for v in &mut data.x {
        *v = (*v * 4.0).round();
    }
    for v in &mut data.weight {
        *v = (*v * 8.0).round() * scale;
    }
    data.bias.fill(0.0);
    let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
    let got = run_stages(x, w, b, labels, 1.0);
    let want = reference_stages(&data, 1.0);
    let reports = got.gates(&want);
    assert_gates("logits near 1e30", &reports[..7]);
    assert!(got.h.iter().cloned().fold(0.0, f64::max) > 1e29);
    assert!(got.loss.is_finite() && burn_fused_head_testing::gates::within(got.loss, want.loss));
    let (c, i) = (data.classes, data.inputs);
    for (k, (g, r)) in got.dx.iter().zip(&want.dx).enumerate() {
        let (row, col) = (k / i, k % i);
        let terms: f64 = (0..c)
            .map(|j| (want.dz[row * c + j] * data.weight[j * i + col] as f64).abs())
            .sum();
        let bound = 2e-5 + 2e-4 * r.abs() + 1e-6 * terms;
        assert!(
            (g - r).abs() <= bound,
            "dX[{k}]: got {g:e}, want {r:e}, bound {bound:e}"
        );
    }
}

/// Every row dead (every Z <= 0): H = 0, loss = ln(C), gradients exactly as the reference.
#[test]
fn all_rows_dead_give_ln_c() {
    let device = &device();
    let mut data = HeadData::random(61, 7, 5, 4);
    data.x.fill(0.0);
    data.bias = vec![-1.0, -0.5, -0.25, 0.0];
    let got = check_stages::<B>(device, &data, 1.0, "all rows dead");
    assert!(
        (got.loss - 4f64.ln()).abs() < 1e-6,
        "loss {} != ln 4",
        got.loss
    );
    assert!(got.dz.iter().all(|v| *v == 0.0));
}

/// From B = 16384 on, the small-C forward runs as row tiles (one unit per row; 128 rows per cube
/// up to C = 16, 32 above): a bad label in the last, partial cube gives a NaN loss and NaN
/// gradients there as elsewhere, and valid data gives the same bits twice. (On NdArray: the
/// same checks on the stock path.)
#[test]
fn a_bad_label_in_a_large_batch_gives_nan_and_repeats_are_identical() {
    let device = &device();
    for classes in [5, 20] {
        let mut data = HeadData::random(71, 16400, 8, classes);
        let grads = |data: &HeadData| {
            let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
            head_grads(x, w, b, labels, 1.0, relu_loss)
        };
        let first = grads(&data);
        assert!(first.loss.is_finite(), "C = {classes}: loss {}", first.loss);
        assert_eq!(
            bits(first),
            bits(grads(&data)),
            "C = {classes}: a repeat differs"
        );
        data.labels[16399] = -1;
        let bad = grads(&data);
        assert!(bad.loss.is_nan(), "C = {classes}: loss {}", bad.loss);
        assert!(
            bad.dw.iter().chain(&bad.db).any(|v| v.is_nan()),
            "C = {classes}: no NaN in dW, db"
        );
    }
}

#[test]
fn same_bits_across_calls_threads_and_processes() {
    let device = &device();
    // This test's name as the test harness knows it (the crate's name left out).
    let path = module_path!().split_once("::").map_or("", |(_, p)| p);
    let test_name = &format!("{path}::same_bits_across_calls_threads_and_processes");
    let serial = fingerprint::<B>(device);
    assert_eq!(fingerprint::<B>(device), serial, "a repeated call differs");
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let device = self::device();
            std::thread::spawn(move || fingerprint::<B>(&device))
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), serial, "a concurrent call differs");
    }
    // Another process: this test binary again, asked to print its fingerprint.
    let hash = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        serial.hash(&mut h);
        h.finish()
    };
    if std::env::var("FUSED_HEAD_FINGERPRINT").is_ok() {
        println!("\nFINGERPRINT {hash:x}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env("FUSED_HEAD_FINGERPRINT", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("FINGERPRINT"))
        .unwrap_or_else(|| panic!("child said: {stdout}"));
    assert_eq!(
        line,
        format!("FINGERPRINT {hash:x}"),
        "another process gave other bits"
    );
}

/// Long training: the loss stays finite and device memory in use does not grow.
#[test]
fn long_training_stays_finite_and_memory_does_not_grow() {
    let device = &device();
    use burn::module::AutodiffModule;
    use burn::optim::{GradientsParams, Optimizer, SgdConfig};
    use burn_fused_head::{FusedLinearCrossEntropyConfig, HeadActivation};
    type A<B> = Autodiff<B>;
    let data = HeadData::random(71, 32, 16, 8);
    let (x, w, b, labels) = data.tensors::<A<B>>(device, DType::F32);
    // W and b from the data, in f32 whatever the device's default dtype (another test may have
    // made the CPU device's default f64 for its reference).
    let mut head = FusedLinearCrossEntropyConfig::new(16, 8)
        .with_activation(HeadActivation::Relu)
        .init::<A<B>>(device);
    head.weight = burn::module::Param::from_tensor(w);
    head.bias = Some(burn::module::Param::from_tensor(b));
    let mut optim = SgdConfig::new().init();
    let mut after_warmup = None;
    let steps = LONG_RUN_STEPS;
    for step in 0..steps {
        let loss = head.forward_loss(x.clone(), labels.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &head);
        head = optim.step(0.1, head, grads);
        if step == 100 || step + 1 == steps {
            let loss = to_f64(
                head.valid()
                    .forward_loss(x.clone().inner(), labels.clone().inner()),
            )[0];
            assert!(loss.is_finite(), "step {step}: loss {loss}");
            <B as burn::tensor::backend::Backend>::sync(device).unwrap();
            let used = memory_in_use();
            match (after_warmup, used) {
                (None, _) => after_warmup = Some(used),
                (Some(Some(before)), Some(now)) => {
                    assert!(
                        now <= before + (1 << 20),
                        "device memory grew: {before} -> {now} bytes"
                    )
                }
                _ => {}
            }
        }
    }
}

/// B = 0 with every subset of X, W and b tracked, on both paths and in both precisions: the
/// loss is NaN, dW and db read back as zeros, dX is `[0, I]` and the logits `[0, C]` on the
/// autodiff and the inner backend, no launch is refused, and a normal call right after
/// succeeds. (The empty tensors are checked by shape: Burn 0.21 on CUDA with fusion can fail to
/// read an empty tensor back, a bytemuck alignment panic inside `into_data`.)
#[test]
fn an_empty_batch_works_with_every_tracked_subset_and_the_device_stays_usable() {
    let device = &device();
    type A = Autodiff<B>;
    for classes in [3, 40] {
        for precision in [HeadPrecision::Exact, HeadPrecision::Tf32] {
            for tracked in 0..8u8 {
                let context =
                    format!("C = {classes}, {precision:?}, tracked X W b = {tracked:03b}");
                let data = HeadData::random(49, 0, 4, classes);
                let (x, w, b, labels) = data.tensors::<A>(device, DType::F32);
                let x = if tracked & 4 != 0 {
                    x.require_grad()
                } else {
                    x
                };
                let w = if tracked & 2 != 0 {
                    w.require_grad()
                } else {
                    w
                };
                let b = if tracked & 1 != 0 {
                    b.require_grad()
                } else {
                    b
                };
                let loss = fused_linear_cross_entropy(
                    x.clone(),
                    w.clone(),
                    Some(b.clone()),
                    labels,
                    &opts(precision),
                );
                assert!(to_f64(loss.clone())[0].is_nan(), "{context}: loss");
                if tracked != 0 {
                    let grads = loss.backward();
                    if let Some(dx) = x.grad(&grads) {
                        assert_eq!(dx.dims(), [0, 4], "{context}: dX");
                    }
                    for (name, grad) in [
                        ("dW", w.grad(&grads).map(to_f64)),
                        ("db", b.grad(&grads).map(to_f64)),
                    ] {
                        if let Some(grad) = grad {
                            assert!(grad.iter().all(|v| *v == 0.0), "{context}: {name} {grad:?}");
                        }
                    }
                }
                let h = logits(x.clone(), w.clone(), b.clone(), opts(precision));
                assert_eq!(h.dims(), [0, classes], "{context}: logits");
                let h = logits(x.inner(), w.inner(), b.inner(), opts(precision));
                assert_eq!(h.dims(), [0, classes], "{context}: inner logits");
            }
        }
        let data = HeadData::random(50, 5, 4, classes);
        let (x, w, b, labels) = data.tensors::<B>(device, DType::F32);
        let loss = to_f64(fused_linear_cross_entropy(
            x,
            w,
            Some(b),
            labels,
            &relu_options(),
        ))[0];
        assert!(
            loss.is_finite(),
            "C = {classes}: the call after the empty batches: {loss}"
        );
    }
}

/// A NaN in X, W or b reaches the loss at every width from C = 1 to 64 and at C = 300 (both
/// paths, both precisions above C = 32), and an infinity gives what the reference gives (NaN
/// where `inf - inf` or `0 * inf` arises, a number where ReLU clamps `-inf` to 0).
#[test]
fn nan_and_infinity_reach_the_loss_at_every_width() {
    let device = &device();
    for classes in (1..=64).chain([300]) {
        for (what, value) in [
            ("X", f32::NAN),
            ("W", f32::NAN),
            ("b", f32::NAN),
            ("X", f32::INFINITY),
            ("W", f32::NEG_INFINITY),
        ] {
            let mut data = HeadData::random(54 + classes as u64, 5, 7, classes);
            match what {
                "X" => data.x[8] = value,
                "W" => data.weight[classes * 7 / 2] = value,
                _ => data.bias[classes / 2] = value,
            }
            let want = reference_stages(&data, 1.0).loss;
            assert!(
                !value.is_nan() || want.is_nan(),
                "the reference dropped a NaN"
            );
            let precisions: &[HeadPrecision] = if classes > 32 {
                &[HeadPrecision::Exact, HeadPrecision::Tf32]
            } else {
                &[HeadPrecision::Exact]
            };
            for &precision in precisions {
                let (x, w, b, labels) = data.tensors::<Autodiff<B>>(device, DType::F32);
                let got = head_grads(x, w, b, labels, 1.0, |x, w, b, l| {
                    fused_linear_cross_entropy(x, w, Some(b), l, &opts(precision))
                });
                assert_eq!(
                    got.loss.is_nan(),
                    want.is_nan(),
                    "C = {classes}, {what} = {value}, {precision:?}: loss {} against the \
                     reference's {want}",
                    got.loss
                );
            }
        }
    }
}
