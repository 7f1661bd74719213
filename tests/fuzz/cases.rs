/// Random cases of the whole op, each within the gate of the f64 reference.
#[test]
fn random_cases_match_the_reference() {
    let ran = fuzz::<B>(&device(), CASES);
    assert!(ran > 0, "no case ran");
}
