//! Day 100 on the CPU: the digits MLP with the fused head learns (the loss falls epoch by epoch,
//! test accuracy above 90%), and follows the stock head's curve from the same initial weights.

#[path = "../examples/train_digits.rs"]
mod train_digits;

use burn::backend::{Autodiff, NdArray};
use burn_fused_head_testing::gates::within;
use train_digits::{HeadKind, load_digits, train};

#[test]
fn fused_head_learns_the_digits_like_the_stock_head() {
    type B = Autodiff<NdArray<f32>>;
    let device = Default::default();
    let digits = load_digits(2026);
    let (_, fused) = train::<B>(HeadKind::Fused, &digits, 10, 64, 2026, &device, false);
    let (_, stock) = train::<B>(HeadKind::Stock, &digits, 10, 64, 2026, &device, false);

    for pair in fused.windows(2) {
        assert!(
            pair[1].train_loss < pair[0].train_loss,
            "train loss rose: {fused:?}"
        );
    }
    let last = fused.last().unwrap();
    assert!(
        last.test_accuracy > 0.90,
        "test accuracy {}",
        last.test_accuracy
    );

    // Drop-in: epoch by epoch, the same curve as the stock head under the gate.
    for (e, (a, b)) in fused.iter().zip(&stock).enumerate() {
        assert!(
            within(a.train_loss, b.train_loss),
            "epoch {e}: train loss {} vs stock {}",
            a.train_loss,
            b.train_loss
        );
        assert!(
            within(a.test_loss, b.test_loss),
            "epoch {e}: test loss {} vs stock {}",
            a.test_loss,
            b.test_loss
        );
    }
}
