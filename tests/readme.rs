//! The README shows the API with `examples/readme.rs` (which `cargo test` compiles): its code,
//! between the `README: begin` and `README: end` markers, must appear in the README verbatim, so
//! that the snippet a user copies is code that compiles.

#[test]
fn readme_shows_the_example_that_compiles() {
    let readme = include_str!("../README.md");
    let example = include_str!("../examples/readme.rs");
    let begin = example.find("// README: begin\n").expect("begin marker") + 17;
    let end = example.find("// README: end").expect("end marker");
    let snippet = &example[begin..end];
    assert!(
        readme.contains(&format!("```rust\n{snippet}```")),
        "README.md must show examples/readme.rs between its markers, verbatim:\n{snippet}"
    );
}
