//! Pattern strings: which block kind each layer is (blocks.md, "Pattern strings").
//!
//! ```text
//! pattern := seq
//! seq     := element*
//! element := kind | "(" seq ")" | count "x" "(" seq ")" | count "x" seq   (rest of seq)
//! kind    := "t" | "s" | "p" | "l"
//! count   := decimal integer >= 1
//! ```

use std::fmt;

/// Serialised (and parsed) as its pattern letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum BlockKind {
    /// TPBlock: two forward all-reduces.
    #[serde(rename = "t")]
    T,
    /// SPDBlock: one forward all-reduce.
    #[serde(rename = "s")]
    S,
    /// ParallelBlock: one forward all-reduce per maximal run.
    #[serde(rename = "p")]
    P,
    /// LadderBlock: two forward all-reduces, each waited for one module later.
    #[serde(rename = "l")]
    L,
}

impl fmt::Display for BlockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.letter())
    }
}

impl BlockKind {
    pub fn letter(self) -> char {
        match self {
            BlockKind::T => 't',
            BlockKind::S => 's',
            BlockKind::P => 'p',
            BlockKind::L => 'l',
        }
    }
}

/// The most layers a pattern may expand to: ten times GPT-3's 96. It bounds the expansion
/// itself, so that nested repeats (`9999x(9999x(9999xt))`) are refused before anything is
/// allocated, and the depth of the autograd graph, whose backward pass and drop recurse
/// per node (measured here: 2,000 layers fit a 2 MiB thread stack, 3,500 do not; rank
/// threads get 64 MiB, MPI ranks the main thread's 8 MiB).
pub const MAX_LAYERS: usize = 1_000;

/// A parsed pattern: the source text and one kind per layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub pattern: String,
    pub kinds: Vec<BlockKind>,
}

impl Layout {
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let kinds = parse(pattern)?;
        Ok(Self {
            pattern: pattern.to_string(),
            kinds,
        })
    }
    pub fn n_layer(&self) -> usize {
        self.kinds.len()
    }
    /// The expanded layout, one letter per layer.
    pub fn expanded(&self) -> String {
        self.kinds.iter().map(|k| k.letter()).collect()
    }
    /// Maximal runs of consecutive `p` blocks as (first layer, length).
    pub fn p_runs(&self) -> Vec<(usize, usize)> {
        self.runs_of(BlockKind::P)
    }
    /// Maximal runs of consecutive blocks of `kind` as (first layer, length).
    pub fn runs_of(&self, kind: BlockKind) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        let mut i = 0;
        while i < self.kinds.len() {
            if self.kinds[i] == kind {
                let start = i;
                while i < self.kinds.len() && self.kinds[i] == kind {
                    i += 1;
                }
                runs.push((start, i - start));
            } else {
                i += 1;
            }
        }
        runs
    }
    /// The length of the p runs of a layout of `s` and `p` blocks whose p runs are all
    /// equally long (0 for all `s`): `12xs` 0, `4x(spp)` 2, `s11xp` 11, `12xp` 12.
    pub fn uniform_p_run(&self) -> Option<usize> {
        if self
            .kinds
            .iter()
            .any(|k| !matches!(k, BlockKind::S | BlockKind::P))
        {
            return None;
        }
        let runs = self.p_runs();
        let k = runs.first().map_or(0, |r| r.1);
        runs.iter().all(|r| r.1 == k).then_some(k)
    }

    /// blocks.md's count: `2 * count(t) + 2 * count(l) + count(s) + number of maximal
    /// p-runs`.
    pub fn forward_allreduces(&self) -> usize {
        let count = |kind| self.kinds.iter().filter(|k| **k == kind).count();
        2 * count(BlockKind::T)
            + 2 * count(BlockKind::L)
            + count(BlockKind::S)
            + self.p_runs().len()
    }

    /// Forward all-reduces a rank waits for with nothing to compute meanwhile: `t`'s two,
    /// `s`'s one, one per p-run, and one per maximal run of `l` blocks (its last MLP sum,
    /// which no module follows inside the run; every other `l` all-reduce runs while the
    /// next module computes). Equal to [`Layout::forward_allreduces`] without `l`.
    pub fn exposed_allreduces(&self) -> usize {
        let count = |kind| self.kinds.iter().filter(|k| **k == kind).count();
        2 * count(BlockKind::T)
            + count(BlockKind::S)
            + self.p_runs().len()
            + self.runs_of(BlockKind::L).len()
    }
}

/// A pattern error: what is wrong and at which character (0-based byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    pub pattern: String,
    pub position: usize,
    pub message: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A pattern thousands of letters long is shown by its start.
        let shown: String = if self.pattern.chars().count() > 64 {
            format!("{}...", self.pattern.chars().take(60).collect::<String>())
        } else {
            self.pattern.clone()
        };
        write!(
            f,
            "bad pattern \"{}\": {} at position {} (use t, s, p, l, groups \"(..)\" and repeats like \"3xsppp\")",
            shown,
            self.message,
            self.position + 1
        )
    }
}

impl std::error::Error for PatternError {}

struct Parser<'a> {
    src: &'a str,
    chars: Vec<char>,
    pos: usize,
}

/// Expands a pattern into one block kind per layer.
pub fn parse(pattern: &str) -> Result<Vec<BlockKind>, PatternError> {
    let mut p = Parser {
        src: pattern,
        chars: pattern.chars().collect(),
        pos: 0,
    };
    if p.chars.is_empty() {
        return Err(p.err(0, "the pattern is empty".into()));
    }
    let kinds = p.seq(None)?;
    if p.pos < p.chars.len() {
        // Only a stray ')' stops the top-level sequence early.
        return Err(p.err(p.pos, "unbalanced ')' with no matching '('".into()));
    }
    if kinds.is_empty() {
        return Err(p.err(0, "the pattern has no blocks".into()));
    }
    Ok(kinds)
}

impl Parser<'_> {
    fn err(&self, position: usize, message: String) -> PatternError {
        PatternError {
            pattern: self.src.to_string(),
            position,
            message,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    /// Parses elements until the end or a ')' (left unconsumed).
    fn seq(&mut self, open: Option<usize>) -> Result<Vec<BlockKind>, PatternError> {
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                ')' => {
                    if open.is_none() {
                        return Err(
                            self.err(self.pos, "unbalanced ')' with no matching '('".into())
                        );
                    }
                    break;
                }
                't' | 's' | 'p' | 'l' => {
                    self.room(&out, 1, 1, self.pos)?;
                    out.push(match c {
                        't' => BlockKind::T,
                        's' => BlockKind::S,
                        'p' => BlockKind::P,
                        _ => BlockKind::L,
                    });
                    self.pos += 1;
                }
                '(' => out.extend(self.group()?),
                '0'..='9' => {
                    let (count, count_pos) = self.count()?;
                    let x_pos = self.pos;
                    match self.peek() {
                        Some('x') => self.pos += 1,
                        Some(other) => {
                            return Err(self.err(
                                self.pos,
                                format!("count {count} is followed by '{other}' instead of 'x'"),
                            ))
                        }
                        None => {
                            return Err(
                                self.err(count_pos, format!("count {count} has no 'x' after it"))
                            )
                        }
                    }
                    if count == 0 {
                        return Err(
                            self.err(count_pos, "a repeat count must be at least 1 ('0x')".into())
                        );
                    }
                    let body = match self.peek() {
                        None | Some(')') => {
                            return Err(
                                self.err(x_pos, "trailing 'x' with nothing to repeat".into())
                            )
                        }
                        Some('(') => self.group()?,
                        // "count x seq": the rest of the enclosing sequence.
                        Some(_) => {
                            let rest = self.seq(open)?;
                            self.room(&out, rest.len(), count, count_pos)?;
                            for _ in 0..count {
                                out.extend_from_slice(&rest);
                            }
                            return Ok(out);
                        }
                    };
                    self.room(&out, body.len(), count, count_pos)?;
                    for _ in 0..count {
                        out.extend_from_slice(&body);
                    }
                }
                other => {
                    return Err(self.err(
                        self.pos,
                        format!("unknown block kind '{other}' (blocks are t, s and p)"),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Fails unless `out` can take `count` more copies of `len` layers within
    /// [`MAX_LAYERS`] (checked arithmetic: the product of nested counts is never formed
    /// unchecked, and nothing beyond the limit is ever allocated).
    fn room(
        &self,
        out: &[BlockKind],
        len: usize,
        count: usize,
        position: usize,
    ) -> Result<(), PatternError> {
        let total = len
            .checked_mul(count)
            .and_then(|n| n.checked_add(out.len()));
        match total {
            Some(n) if n <= MAX_LAYERS => Ok(()),
            _ => Err(self.err(
                position,
                format!("the pattern expands to more than {MAX_LAYERS} layers"),
            )),
        }
    }

    fn group(&mut self) -> Result<Vec<BlockKind>, PatternError> {
        let open = self.pos;
        self.pos += 1; // '('
        let body = self.seq(Some(open))?;
        if self.peek() != Some(')') {
            return Err(self.err(open, "unbalanced '(' is never closed".into()));
        }
        if body.is_empty() {
            return Err(self.err(open, "empty group '()'".into()));
        }
        self.pos += 1; // ')'
        Ok(body)
    }

    fn count(&mut self) -> Result<(usize, usize), PatternError> {
        let start = self.pos;
        while matches!(self.peek(), Some('0'..='9')) {
            self.pos += 1;
        }
        let digits: String = self.chars[start..self.pos].iter().collect();
        let n = digits
            .parse::<usize>()
            .map_err(|_| self.err(start, format!("count {digits} is too large")))?;
        if n > 100_000 {
            return Err(self.err(start, format!("count {digits} is too large")));
        }
        Ok((n, start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(p: &str) -> String {
        Layout::parse(p).unwrap().expanded()
    }

    #[test]
    fn blocks_md_examples_expand_as_stated() {
        assert_eq!(expand("3xsppp"), "sppp".repeat(3));
        assert_eq!(expand("t3xsp"), "tspspsp");
        assert_eq!(expand("2x(ts)4xp"), "tstspppp");
        assert_eq!(expand("12xt"), "t".repeat(12));
        assert_eq!(expand("sppp"), "sppp");
        assert_eq!(expand("tstt"), "tstt");
        assert_eq!(expand("3x(sp)"), "spspsp");
        assert_eq!(expand("6x(ts)"), "ts".repeat(6));
        assert_eq!(expand("2x(s5xp)"), "sppppp".repeat(2));
        assert_eq!(Layout::parse("3xsppp").unwrap().n_layer(), 12);
    }

    #[test]
    fn blocks_md_examples_have_the_stated_forward_allreduce_counts() {
        for (p, n) in [
            ("tttt", 8),
            ("tstt", 7),
            ("sppp", 2),
            ("pppp", 1),
            ("ssss", 4),
            ("spps", 3),
            ("3xsppp", 6),
            ("12xt", 24),
            ("12xs", 12),
            ("6x(ts)", 18),
            ("4x(tss)", 16),
            ("4x(spp)", 8),
            ("2x(s5xp)", 4),
            ("6x(sp)", 12),
            ("llll", 8),
            ("tllp", 7),
            ("lsll", 7),
            ("2x(ll)p", 9),
        ] {
            assert_eq!(Layout::parse(p).unwrap().forward_allreduces(), n, "{p}");
        }
    }

    #[test]
    fn ladder_letters_expand_count_and_fail_like_the_others() {
        assert_eq!(expand("2x(lt)3xl"), "ltltlll");
        assert_eq!(
            Layout::parse("tllpl").unwrap().runs_of(BlockKind::L),
            vec![(1, 2), (4, 1)]
        );
        let (pos, msg) = err_at("ll0xl");
        assert_eq!(pos, 2);
        assert!(msg.contains("0x") && msg.contains("t, s, p, l"), "{msg}");
        let (pos, msg) = err_at("lL");
        assert_eq!(pos, 1);
        assert!(msg.contains("'L'"), "{msg}");
    }

    /// A run of l blocks leaves one all-reduce exposed (its last MLP sum); without l the
    /// exposed count is the forward count.
    #[test]
    fn exposed_allreduces_count_one_per_ladder_run() {
        for (p, forward, exposed) in [
            ("tttt", 8, 8),
            ("llll", 8, 1),
            ("tttl", 8, 7),
            ("ltlt", 8, 6),
            ("tllp", 7, 4),
            ("sppp", 2, 2),
        ] {
            let l = Layout::parse(p).unwrap();
            assert_eq!(
                (l.forward_allreduces(), l.exposed_allreduces()),
                (forward, exposed),
                "{p}"
            );
        }
    }

    #[test]
    fn p_runs_are_maximal_including_runs_of_length_one() {
        let l = Layout::parse("pspp").unwrap();
        assert_eq!(l.p_runs(), vec![(0, 1), (2, 2)]);
        let l = Layout::parse("tpst").unwrap();
        assert_eq!(l.p_runs(), vec![(1, 1)]);
    }

    fn err_at(p: &str) -> (usize, String) {
        let e = Layout::parse(p).unwrap_err();
        (e.position, e.to_string())
    }

    #[test]
    fn each_error_class_names_the_offending_character() {
        let (pos, msg) = err_at("");
        assert_eq!(pos, 0);
        assert!(msg.contains("empty"), "{msg}");

        let (pos, msg) = err_at("tsqt");
        assert_eq!(pos, 2);
        assert!(msg.contains("'q'") && msg.contains("position 3"), "{msg}");

        let (pos, msg) = err_at("t0xs");
        assert_eq!(pos, 1);
        assert!(msg.contains("0x"), "{msg}");

        let (pos, msg) = err_at("t3s");
        assert_eq!(pos, 2);
        assert!(msg.contains("'s' instead of 'x'"), "{msg}");

        let (pos, msg) = err_at("ts3");
        assert_eq!(pos, 2);
        assert!(msg.contains("no 'x'"), "{msg}");

        let (pos, msg) = err_at("(ts");
        assert_eq!(pos, 0);
        assert!(msg.contains("'('"), "{msg}");

        let (pos, msg) = err_at("ts)t");
        assert_eq!(pos, 2);
        assert!(msg.contains("')'"), "{msg}");

        let (pos, msg) = err_at("ts3x");
        assert_eq!(pos, 3);
        assert!(msg.contains("trailing 'x'"), "{msg}");

        let (pos, msg) = err_at("2x(t3x)");
        assert_eq!(pos, 5);
        assert!(msg.contains("trailing 'x'"), "{msg}");

        let (pos, msg) = err_at("t()");
        assert_eq!(pos, 1);
        assert!(msg.contains("empty group"), "{msg}");
    }

    #[test]
    fn nested_counts_are_multiplied_before_expanding_and_the_layer_limit_holds() {
        // Refused at the first count whose product passes the limit, nothing that size
        // allocated: 9999^3 at the innermost count; 30 x 30 x 30 (each count small, the
        // product 27000) at the outermost.
        let (pos, msg) = err_at("9999x(9999x(9999x(t)))");
        assert_eq!(pos, 12);
        assert!(msg.contains("more than 1000 layers"), "{msg}");
        let (pos, msg) = err_at("30x(30x(30xt))");
        assert_eq!(pos, 0);
        assert!(msg.contains("more than 1000 layers"), "{msg}");
        assert_eq!(Layout::parse("10x(10x(10xt))").unwrap().n_layer(), 1000);
        let (_, msg) = err_at("100000x100000x100000xt");
        assert!(msg.contains("more than 1000 layers"), "{msg}");
        let (pos, _) = err_at("2x(500xt)t");
        assert_eq!(pos, 9);
        assert_eq!(Layout::parse("2x(500xt)").unwrap().n_layer(), MAX_LAYERS);
        assert_eq!(
            Layout::parse(&"t".repeat(MAX_LAYERS)).unwrap().n_layer(),
            MAX_LAYERS
        );
        let (pos, msg) = err_at(&"s".repeat(MAX_LAYERS + 1));
        assert_eq!(pos, MAX_LAYERS);
        assert!(msg.contains("more than 1000 layers"), "{msg}");
    }
}
