//! A small GPT-style language model trained on real text with the fused head, beside the same
//! model with Burn's stock head (`Linear` + `CrossEntropyLoss`) from the same initialisation.
//!
//! The corpus is on every machine that built this repository: the Rust sources of the
//! `burn-*` 0.21.0 and `cubecl-*` 0.10.0 crates in cargo's registry (`$CARGO_HOME/registry/src`),
//! 13.4 MB in 1 631 files (2026-12-02), read in path order; the last 5% of the token stream is
//! held out. A byte-level BPE vocabulary is trained on them with the `tokenizers` crate. The
//! model: token and position embeddings, pre-norm transformer blocks from `burn::nn`
//! (`TransformerEncoder` with a causal mask, no dropout), a final `LayerNorm`, then the head,
//! the same weights for both heads at step 0.
//!
//! ```text
//! cargo run --release --example lm                                   # NdArray, a tiny model
//! cargo run --release --example lm --features cuda -- --vocab 32000 --layers 4 --d-model 512 \
//!     --seq 256 --batch 32 --steps 600 --head both --csv lm.csv
//! ```
//!
//! Flags (defaults: the tiny CPU run): `--vocab` (BPE size, 1000), `--corpus-bytes` (read at
//! most this much text, 2 MB), `--layers` (2), `--d-model` (64), `--heads` (4), `--seq` (64),
//! `--batch` (8), `--steps` (30; 0 for the tokens alone), `--lr` (1e-3), `--head fused|stock|both` (both),
//! `--precision exact|tf32` (the fused head's, exact), `--tokens FILE` (token ids, u16 little
//! endian, from an earlier `--write-tokens FILE`: no corpus or BPE needed, as on a machine
//! without cargo's registry), `--csv FILE` (one row per logged step). Prints a progress bar,
//! each head's loss, tokens per second and, on CUDA, the most bytes in use it saw.

#![allow(dead_code)] // `tests/lm.rs` includes this file for its functions

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::{AutodiffModule, Module, Param};
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Element, ElementConversion, Int, Tensor, TensorData};
use burn_fused_head::{
    FusedHeadBackend, FusedLinearCrossEntropy, FusedLinearCrossEntropyConfig, HeadPrecision,
};

/// The command line's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub vocab: usize,
    pub corpus_bytes: usize,
    pub layers: usize,
    pub d_model: usize,
    pub heads: usize,
    pub seq: usize,
    pub batch: usize,
    pub steps: usize,
    pub lr: f64,
    pub head: String,
    pub precision: HeadPrecision,
    pub tokens: Option<PathBuf>,
    pub write_tokens: Option<PathBuf>,
    pub csv: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            vocab: 1000,
            corpus_bytes: 2 << 20,
            layers: 2,
            d_model: 64,
            heads: 4,
            seq: 64,
            batch: 8,
            steps: 30,
            lr: 1e-3,
            head: "both".into(),
            precision: HeadPrecision::Exact,
            tokens: None,
            write_tokens: None,
            csv: None,
        }
    }
}

impl Settings {
    /// The settings of `args` (the program's arguments after its name).
    pub fn parse(args: &[String]) -> Self {
        let mut s = Self::default();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .unwrap_or_else(|| panic!("{flag} needs a value"))
                    .clone()
            };
            let number =
                |v: String| -> usize { v.parse().unwrap_or_else(|_| panic!("{flag}: a number")) };
            match flag.as_str() {
                "--vocab" => s.vocab = number(value()),
                "--corpus-bytes" => s.corpus_bytes = number(value()),
                "--layers" => s.layers = number(value()),
                "--d-model" => s.d_model = number(value()),
                "--heads" => s.heads = number(value()),
                "--seq" => s.seq = number(value()),
                "--batch" => s.batch = number(value()),
                "--steps" => s.steps = number(value()),
                "--lr" => s.lr = value().parse().expect("--lr: a number"),
                "--head" => s.head = value(),
                "--precision" => {
                    s.precision = match value().as_str() {
                        "exact" => HeadPrecision::Exact,
                        "tf32" => HeadPrecision::Tf32,
                        other => panic!("--precision exact|tf32, got {other}"),
                    }
                }
                "--tokens" => s.tokens = Some(value().into()),
                "--write-tokens" => s.write_tokens = Some(value().into()),
                "--csv" => s.csv = Some(value().into()),
                other => panic!("unknown flag {other} (see the example's header)"),
            }
        }
        assert!(
            matches!(s.head.as_str(), "fused" | "stock" | "both"),
            "--head fused|stock|both"
        );
        s
    }
}

/// The corpus's files: every `.rs` file of the `burn-*-0.21.0` and `cubecl-*-0.10.0` crates in
/// cargo's registry, in path order.
pub fn corpus_files() -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let registry = home.join("registry").join("src");
    let mut crates = Vec::new();
    for index in std::fs::read_dir(&registry).unwrap_or_else(|e| {
        panic!(
            "cargo's registry at {}: {e} (build this repository first)",
            registry.display()
        )
    }) {
        for krate in std::fs::read_dir(index.expect("a registry index").path())
            .into_iter()
            .flatten()
        {
            let path = krate.expect("a crate").path();
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            if (name.starts_with("burn-") && name.ends_with("-0.21.0"))
                || (name.starts_with("cubecl-") && name.ends_with("-0.10.0"))
            {
                crates.push(path);
            }
        }
    }
    let mut files = Vec::new();
    let mut stack = crates;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(
        !files.is_empty(),
        "no burn-*-0.21.0 or cubecl-*-0.10.0 sources under {}",
        registry.display()
    );
    files
}

/// The corpus's text, file by file, at most `bytes` in all.
pub fn corpus(bytes: usize) -> Vec<String> {
    let mut texts = Vec::new();
    let mut total = 0;
    for file in corpus_files() {
        if total >= bytes {
            break;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        total += text.len();
        texts.push(text);
    }
    texts
}

/// A byte-level BPE vocabulary of `vocab` tokens trained on `texts`, and their token ids, file
/// after file.
pub fn tokenize(texts: &[String], vocab: usize) -> Vec<u16> {
    use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::{
        DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
        TokenizerBuilder,
    };
    assert!(
        vocab <= u16::MAX as usize + 1,
        "--vocab: at most 65536 (ids are stored as u16)"
    );
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut tokenizer = TokenizerBuilder::<
        BPE,
        NormalizerWrapper,
        PreTokenizerWrapper,
        PostProcessorWrapper,
        DecoderWrapper,
    >::new()
    .with_model(BPE::default())
    .with_pre_tokenizer(Some(PreTokenizerWrapper::ByteLevel(ByteLevel::default())))
    .with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())))
    .build()
    .expect("a BPE tokenizer");
    tokenizer
        .train(&mut trainer, texts.iter())
        .expect("BPE training");
    let mut ids = Vec::new();
    for text in texts {
        let encoding = tokenizer.encode(text.as_str(), false).expect("an encoding");
        ids.extend(encoding.get_ids().iter().map(|&id| id as u16));
    }
    ids
}

/// The token ids of the run: read from `--tokens`, or the corpus tokenized (and written to
/// `--write-tokens` where given); and the vocabulary size they use.
pub fn tokens(settings: &Settings) -> (Vec<u16>, usize) {
    let ids = match &settings.tokens {
        Some(path) => {
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            bytes
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect()
        }
        None => {
            let t = Instant::now();
            let texts = corpus(settings.corpus_bytes);
            let bytes: usize = texts.iter().map(String::len).sum();
            let ids = tokenize(&texts, settings.vocab);
            println!(
                "corpus: {} files, {:.1} MB, {} tokens (BPE of {} trained and applied in {:.1} s)",
                texts.len(),
                bytes as f64 / 1e6,
                ids.len(),
                settings.vocab,
                t.elapsed().as_secs_f64()
            );
            ids
        }
    };
    if let Some(path) = &settings.write_tokens {
        let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let vocab = ids
        .iter()
        .map(|&id| id as usize + 1)
        .max()
        .unwrap_or(1)
        .max(settings.vocab);
    (ids, vocab)
}

/// Everything below the head: embeddings, transformer blocks, the final norm.
#[derive(Module, Debug)]
pub struct Trunk<B: Backend> {
    tokens: Embedding<B>,
    positions: Embedding<B>,
    blocks: TransformerEncoder<B>,
    norm: LayerNorm<B>,
}

impl<B: Backend> Trunk<B> {
    pub fn new(settings: &Settings, vocab: usize, device: &B::Device) -> Self {
        let d = settings.d_model;
        Self {
            tokens: EmbeddingConfig::new(vocab, d).init(device),
            positions: EmbeddingConfig::new(settings.seq, d).init(device),
            blocks: TransformerEncoderConfig::new(d, 4 * d, settings.heads, settings.layers)
                .with_dropout(0.0)
                .with_norm_first(true)
                .init(device),
            norm: LayerNormConfig::new(d).init(device),
        }
    }

    /// The hidden states `[batch, seq, d]` of `ids` `[batch, seq]`, each position seeing only
    /// itself and the positions before it.
    pub fn forward(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [batch, seq] = ids.dims();
        let device = ids.device();
        let positions = Tensor::<B, 1, Int>::arange(0..seq as i64, &device)
            .unsqueeze_dim::<2>(0)
            .expand([batch, seq]); // [batch, seq]
        let x = self.tokens.forward(ids) + self.positions.forward(positions); // [batch, seq, d]
        let mask = generate_autoregressive_mask::<B>(batch, seq, &device);
        let x = self
            .blocks
            .forward(TransformerEncoderInput::new(x).mask_attn(mask));
        self.norm.forward(x)
    }
}

/// The language model: the trunk, then the fused head or the stock one.
#[derive(Module, Debug)]
pub struct Lm<B: Backend> {
    trunk: Trunk<B>,
    fused: Option<FusedLinearCrossEntropy<B>>,
    stock: Option<Linear<B>>,
}

impl<B: FusedHeadBackend> Lm<B> {
    /// The mean next-token cross-entropy of `ids` `[batch, seq]` against `targets` (the ids one
    /// position on), `[1]`.
    pub fn loss(&self, ids: Tensor<B, 2, Int>, targets: Tensor<B, 2, Int>) -> Tensor<B, 1> {
        let h = self.trunk.forward(ids); // [batch, seq, d]
        match (&self.fused, &self.stock) {
            (Some(head), _) => head.forward_loss(h, targets),
            (None, Some(head)) => {
                let [batch, seq, _] = h.dims();
                let logits = head.forward(h); // [batch, seq, V]
                let vocab = logits.dims()[2];
                CrossEntropyLossConfig::new()
                    .init(&logits.device())
                    .forward(
                        logits.reshape([batch * seq, vocab]),
                        targets.reshape([batch * seq]),
                    )
            }
            (None, None) => unreachable!("a model has a head"),
        }
    }
}

/// The two models from the same initialisation: the stock head's `Linear` weight `[d, V]` is
/// the fused head's `[V, d]` transposed, and the biases are equal.
pub fn models<B: FusedHeadBackend>(
    settings: &Settings,
    vocab: usize,
    device: &B::Device,
) -> (Lm<B>, Lm<B>) {
    // Burn initialises a parameter lazily, on its first read: a clone of a new module would draw
    // its own values. Through a record, both models hold the same ones.
    let record = Trunk::<B>::new(settings, vocab, device).into_record();
    let trunk = Trunk::<B>::new(settings, vocab, device).load_record(record);
    let fused = FusedLinearCrossEntropyConfig::new(settings.d_model, vocab)
        .with_precision(settings.precision)
        .init::<B>(device);
    let stock = Linear {
        weight: Param::from_tensor(Tensor::from_data(
            fused.weight.val().transpose().into_data(),
            device,
        )),
        bias: fused
            .bias
            .as_ref()
            .map(|b| Param::from_tensor(Tensor::from_data(b.val().into_data(), device))),
    };
    (
        Lm {
            trunk: trunk.clone(),
            fused: Some(fused),
            stock: None,
        },
        Lm {
            trunk,
            fused: None,
            stock: Some(stock),
        },
    )
}

/// `batch` windows of `seq + 1` tokens from `ids`, at positions a fixed generator draws:
/// `(inputs, targets)`, `[batch, seq]` each.
pub fn batch<B: Backend>(
    ids: &[u16],
    batch: usize,
    seq: usize,
    draw: &mut u64,
    device: &B::Device,
) -> (Tensor<B, 2, Int>, Tensor<B, 2, Int>) {
    let mut inputs = Vec::with_capacity(batch * seq);
    let mut targets = Vec::with_capacity(batch * seq);
    for _ in 0..batch {
        // SplitMix64, as the tests' inputs.
        *draw = draw.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *draw;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let start = ((z ^ (z >> 31)) % (ids.len() - seq - 1) as u64) as usize;
        inputs.extend(ids[start..start + seq].iter().map(|&id| id as i64));
        targets.extend(ids[start + 1..start + seq + 1].iter().map(|&id| id as i64));
    }
    let int = |v: Vec<i64>| {
        Tensor::<B, 2, Int>::from_data(
            TensorData::new(v, [batch, seq]),
            (device, <B::IntElem as Element>::dtype()),
        )
    };
    (int(inputs), int(targets))
}

/// One logged point of a run.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub step: usize,
    pub loss: f64,
    pub tokens_per_second: f64,
}

/// What one head's run gives: its logged points, the held-out loss at the end, and the most
/// bytes in use seen at the logged steps, synced after the forward pass and after the
/// backward pass (where the backend can tell).
#[derive(Debug, Clone)]
pub struct Run {
    pub name: &'static str,
    pub points: Vec<Point>,
    pub held_out: f64,
    pub peak_bytes: Option<u64>,
}

/// `settings.steps` Adam steps of `model` on `train`, logging every `every` steps; `memory`
/// reads the bytes in use on the device (`None` where it cannot).
pub fn train<B: AutodiffBackend + FusedHeadBackend>(
    name: &'static str,
    mut model: Lm<B>,
    settings: &Settings,
    (train, held_out): (&[u16], &[u16]),
    device: &B::Device,
    memory: &dyn Fn() -> Option<u64>,
) -> Run
where
    B::InnerBackend: FusedHeadBackend,
{
    let mut optim = AdamConfig::new().init();
    let mut draw = 2026;
    let every = (settings.steps / 20).max(1);
    let mut points = Vec::new();
    let mut peak = None::<u64>;
    // The bytes in use now, synced, kept if the most so far.
    let note = |peak: &mut Option<u64>| {
        B::sync(device).expect("a device sync");
        if let Some(bytes) = memory() {
            *peak = Some(peak.map_or(bytes, |p| p.max(bytes)));
        }
    };
    let tokens_per_step = (settings.batch * settings.seq) as f64;
    let mut since = Instant::now();
    let mut since_step = 0;
    for step in 0..settings.steps {
        let (ids, targets) = batch::<B>(train, settings.batch, settings.seq, &mut draw, device);
        let logged = step % every == 0 || step + 1 == settings.steps;
        let loss = model.loss(ids, targets);
        if logged {
            note(&mut peak);
        }
        let grads = loss.backward();
        if logged {
            note(&mut peak);
        }
        let grads = GradientsParams::from_grads(grads, &model);
        model = optim.step(settings.lr, model, grads);
        if logged {
            let loss = loss.into_scalar().elem::<f64>(); // syncs
            let rate =
                tokens_per_step * (step + 1 - since_step) as f64 / since.elapsed().as_secs_f64();
            points.push(Point {
                step,
                loss,
                tokens_per_second: rate,
            });
            progress(name, step + 1, settings.steps, loss, rate);
            since = Instant::now();
            since_step = step + 1;
        }
    }
    println!();
    // The held-out loss: 8 batches, no gradient.
    let mut draw = 7;
    let valid = model.valid();
    let held_out = (0..8)
        .map(|_| {
            let (ids, targets) =
                batch::<B::InnerBackend>(held_out, settings.batch, settings.seq, &mut draw, device);
            valid.loss(ids, targets).into_scalar().elem::<f64>()
        })
        .sum::<f64>()
        / 8.0;
    Run {
        name,
        points,
        held_out,
        peak_bytes: peak,
    }
}

/// A progress bar with the latest figures, on one line.
fn progress(name: &str, done: usize, total: usize, loss: f64, rate: f64) {
    let width = 30;
    let filled = width * done / total.max(1);
    print!(
        "\r{name:>5} [{}{}] {done}/{total} loss {loss:.4} {:.0} tokens/s   ",
        "=".repeat(filled),
        " ".repeat(width - filled),
        rate
    );
    std::io::stdout().flush().ok();
}

/// Runs the heads the settings ask for on `B` and prints the comparison.
pub fn run<B: AutodiffBackend + FusedHeadBackend>(
    settings: &Settings,
    device: &B::Device,
    memory: &dyn Fn() -> Option<u64>,
) -> Vec<Run>
where
    B::InnerBackend: FusedHeadBackend,
{
    let (ids, vocab) = tokens(settings);
    if settings.steps == 0 {
        return Vec::new(); // the tokens alone (with `--write-tokens`)
    }
    assert!(
        ids.len() > 20 * (settings.seq + 1),
        "too few tokens: {}",
        ids.len()
    );
    let split = ids.len() * 95 / 100;
    let data = (&ids[..split], &ids[split..]);
    println!(
        "model: vocab {vocab}, d_model {}, {} layers of {} heads, seq {}, batch {} ({} tokens a step), {} steps, Adam lr {}",
        settings.d_model,
        settings.layers,
        settings.heads,
        settings.seq,
        settings.batch,
        settings.batch * settings.seq,
        settings.steps,
        settings.lr
    );
    let (fused, stock) = models::<B>(settings, vocab, device);
    let mut runs = Vec::new();
    if settings.head != "stock" {
        runs.push(train::<B>("fused", fused, settings, data, device, memory));
    }
    if settings.head != "fused" {
        runs.push(train::<B>("stock", stock, settings, data, device, memory));
    }
    for run in &runs {
        let first = run.points.first().map_or(f64::NAN, |p| p.loss);
        let last = run.points.last().map_or(f64::NAN, |p| p.loss);
        let rates: Vec<f64> = run
            .points
            .iter()
            .skip(1)
            .map(|p| p.tokens_per_second)
            .collect();
        let rate = if rates.is_empty() {
            f64::NAN
        } else {
            rates.iter().sum::<f64>() / rates.len() as f64
        };
        println!(
            "{}: loss {first:.4} -> {last:.4}, held out {:.4}, {rate:.0} tokens/s after the first log, peak in use {}",
            run.name,
            run.held_out,
            run.peak_bytes.map_or("n/a".into(), |b| format!(
                "{:.1} MiB",
                b as f64 / (1 << 20) as f64
            ))
        );
    }
    if let Some(path) = &settings.csv {
        let mut out = String::from("head,step,loss,tokens_per_second\n");
        for run in &runs {
            for p in &run.points {
                out.push_str(&format!(
                    "{},{},{},{}\n",
                    run.name, p.step, p.loss, p.tokens_per_second
                ));
            }
        }
        std::fs::write(path, out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    runs
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let settings = Settings::parse(&args);
    if settings.steps == 0 {
        tokens(&settings); // the tokens alone, before any device is touched
        return;
    }
    #[cfg(feature = "cuda")]
    {
        use cubecl::Runtime;
        type B = burn::backend::Autodiff<burn::backend::Cuda>;
        let device = burn::backend::cuda::CudaDevice::default();
        let client = cubecl::cuda::CudaRuntime::client(&device);
        let memory = move || client.memory_usage().ok().map(|u| u.bytes_in_use);
        run::<B>(&settings, &device, &memory);
    }
    #[cfg(not(feature = "cuda"))]
    run::<burn::backend::Autodiff<burn::backend::NdArray>>(&settings, &Default::default(), &|| {
        None
    });
}
