//! Pattern strings: which block kind each layer is (blocks.md, "Pattern strings").
//!
//! ```text
//! pattern := seq
//! seq     := element*
//! element := kind | "(" seq ")" | count "x" "(" seq ")" | count "x" seq   (rest of seq)
//! kind    := a letter of BlockKind: "t" | "s" | "p" | "l"
//! count   := decimal integer >= 1
//! ```

use super::kind::BlockKind;
use std::fmt;

/// The most layers a pattern may expand to: ten times GPT-3's 96. It bounds the expansion
/// itself, so that nested repeats (`9999x(9999x(9999xt))`) are refused before anything is
/// allocated, and the depth of the autograd graph, whose backward pass and drop recurse
/// per node (measured here: 2,000 layers fit a 2 MiB thread stack, 3,500 do not; rank
/// threads get 64 MiB, MPI ranks the main thread's 8 MiB).
pub const MAX_LAYERS: usize = 1_000;

/// The deepest a pattern's groups and repeats may nest (`((((t))))`, `2x2x2xt`): the
/// parser recurses once per level, and a pattern nested thousands deep would overflow a
/// thread's stack; no layout needs more than a few levels.
pub const MAX_NESTING: usize = 64;

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
            "bad pattern \"{}\": {} at position {} (use {}, groups \"(..)\" and repeats like \"3xsppp\")",
            shown,
            self.message,
            self.position + 1,
            BlockKind::letters()
        )
    }
}

impl std::error::Error for PatternError {}

struct Parser<'a> {
    src: &'a str,
    chars: Vec<char>,
    pos: usize,
    /// Sequences open now (groups and repeats), bounded by [`MAX_NESTING`].
    depth: usize,
}

/// Expands a pattern into one block kind per layer.
pub fn parse(pattern: &str) -> Result<Vec<BlockKind>, PatternError> {
    let mut p = Parser {
        src: pattern,
        chars: pattern.chars().collect(),
        pos: 0,
        depth: 0,
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
        if self.depth >= MAX_NESTING {
            return Err(self.err(
                self.pos,
                format!("groups and repeats nest more than {MAX_NESTING} deep"),
            ));
        }
        self.depth += 1;
        let out = self.elements(open);
        self.depth -= 1;
        out
    }

    fn elements(&mut self, open: Option<usize>) -> Result<Vec<BlockKind>, PatternError> {
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
                c if BlockKind::from_letter(c).is_some() => {
                    self.room(&out, 1, 1, self.pos)?;
                    out.extend(BlockKind::from_letter(c));
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
                        format!(
                            "unknown block kind '{other}' (blocks are {})",
                            BlockKind::letters()
                        ),
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
        parse(p).unwrap().iter().map(|k| k.letter()).collect()
    }

    fn n_layer(p: &str) -> usize {
        parse(p).unwrap().len()
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
        assert_eq!(n_layer("3xsppp"), 12);
    }

    #[test]
    fn ladder_letters_expand_and_fail_like_the_others() {
        assert_eq!(expand("2x(lt)3xl"), "ltltlll");
        let (pos, msg) = err_at("ll0xl");
        assert_eq!(pos, 2);
        assert!(
            msg.contains("0x") && msg.contains(&BlockKind::letters()),
            "{msg}"
        );
        assert!(BlockKind::letters().starts_with("t, s, p, l"));
        let (pos, msg) = err_at("lL");
        assert_eq!(pos, 1);
        assert!(msg.contains("'L'"), "{msg}");
    }

    fn err_at(p: &str) -> (usize, String) {
        let e = parse(p).unwrap_err();
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
        assert_eq!(n_layer("10x(10x(10xt))"), 1000);
        let (_, msg) = err_at("100000x100000x100000xt");
        assert!(msg.contains("more than 1000 layers"), "{msg}");
        let (pos, _) = err_at("2x(500xt)t");
        assert_eq!(pos, 9);
        assert_eq!(n_layer("2x(500xt)"), MAX_LAYERS);
        assert_eq!(n_layer(&"t".repeat(MAX_LAYERS)), MAX_LAYERS);
        let (pos, msg) = err_at(&"s".repeat(MAX_LAYERS + 1));
        assert_eq!(pos, MAX_LAYERS);
        assert!(msg.contains("more than 1000 layers"), "{msg}");
    }

    /// A pattern nested 20,000 deep (the hostile probe's, which overflowed the stack) is
    /// one error at the level past the limit; 64 levels parse.
    #[test]
    fn nesting_deeper_than_the_limit_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}t{}", "(".repeat(20_000), ")".repeat(20_000));
        let (pos, msg) = err_at(&deep);
        assert_eq!(pos, MAX_NESTING);
        assert!(msg.contains("nest more than 64 deep"), "{msg}");
        let (_, msg) = err_at(&format!("{}t", "1x".repeat(20_000)));
        assert!(msg.contains("nest more than 64 deep"), "{msg}");
        let ok = format!(
            "{}t{}",
            "(".repeat(MAX_NESTING - 1),
            ")".repeat(MAX_NESTING - 1)
        );
        assert_eq!(n_layer(&ok), 1);
    }
}
