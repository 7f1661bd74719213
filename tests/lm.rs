//! The language-model example, tiny, on the CPU: a BPE vocabulary of 300 trained on the first
//! 200 kB of the corpus, one transformer block, both heads from the same initialisation. At
//! step 0 they compute the same model (the losses within the gate); both learn (the loss falls
//! over 40 steps) and stay within 2% of each other.

#[path = "../examples/lm.rs"]
mod lm;

use burn::backend::{Autodiff, NdArray};
use burn_fused_head_testing::gates::within;

#[test]
fn a_tiny_language_model_learns_with_either_head() {
    let settings = lm::Settings {
        vocab: 300,
        corpus_bytes: 200_000,
        layers: 1,
        d_model: 32,
        heads: 2,
        seq: 16,
        batch: 8,
        steps: 40,
        lr: 3e-3,
        ..Default::default()
    };
    let runs = lm::run::<Autodiff<NdArray>>(&settings, &Default::default(), &|| None);
    let (fused, stock) = (&runs[0], &runs[1]);
    assert_eq!((fused.name, stock.name), ("fused", "stock"));
    let (f0, s0) = (fused.points[0].loss, stock.points[0].loss);
    assert!(within(f0, s0), "step 0: fused {f0} against stock {s0}");
    for run in &runs {
        let (first, last) = (run.points[0].loss, run.points.last().unwrap().loss);
        assert!(
            last.is_finite() && run.held_out.is_finite(),
            "{}: {last}",
            run.name
        );
        assert!(last < 0.8 * first, "{}: loss {first} -> {last}", run.name);
    }
    let (f, s) = (
        fused.points.last().unwrap().loss,
        stock.points.last().unwrap().loss,
    );
    assert!(
        (f - s).abs() <= 0.02 * s,
        "after 40 steps: fused {f}, stock {s}"
    );
}
