#[test]
fn two_peers_equal_one_device_at_small_c() {
    let data = HeadData::random(31, 48, 8, 10);
    check::<B>(&device(), &data, 2, 4);
}

#[test]
fn four_peers_equal_one_device_at_large_c() {
    // C = 40: the CubeCL backends' streamed path, whose gradients come from the forward pass.
    let data = HeadData::random(32, 64, 8, 40);
    check::<B>(&device(), &data, 4, 3);
}
