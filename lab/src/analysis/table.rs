//! The one table type every report is made of: cells of text, rendered as a markdown table
//! for people and as CSV (by the `csv` crate, which quotes what needs quoting) for
//! programs. Each report formats its numbers once, into cells; both renderings show them.

use anyhow::Result;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (as many cells as the header has).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        debug_assert_eq!(cells.len(), self.header.len(), "{cells:?}");
        self.rows.push(cells);
    }

    pub fn rows(&self) -> &[Vec<String>] {
        &self.rows
    }

    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// `| a | b |` lines under a `|---|---|` rule (a `|` inside a cell escaped).
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| {
            let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut out = line(&self.header);
        out.push_str(&format!("|{}\n", "---|".repeat(self.header.len())));
        self.rows.iter().for_each(|r| out.push_str(&line(r)));
        out
    }

    /// The header, then one line per row.
    pub fn csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let written = std::iter::once(&self.header)
            .chain(&self.rows)
            .try_for_each(|cells| w.write_record(cells));
        // Writing text into memory fails only on a bug.
        let bytes = written.map(|()| w.into_inner().expect("CSV into memory"));
        String::from_utf8(bytes.expect("CSV into memory")).expect("CSV of UTF-8 cells")
    }

    /// A table read back from [`Table::csv`]'s text.
    pub fn from_csv(text: &str) -> Result<Self> {
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let header = r.headers()?.iter().map(String::from).collect();
        let rows = r
            .records()
            .map(|rec| Ok(rec?.iter().map(String::from).collect()))
            .collect::<Result<_>>()?;
        Ok(Self { header, rows })
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn a_cell_with_a_comma_and_a_quote_round_trips_through_csv() {
        let mut t = Table::new(["setting", "loss"]);
        t.row(["4x128/4h, tp 2 [dropout: \"0.1\"]", "1.4875"]);
        t.row(["plain", ""]);
        let csv = t.csv();
        assert_eq!(
            csv,
            "setting,loss\n\"4x128/4h, tp 2 [dropout: \"\"0.1\"\"]\",1.4875\nplain,\n"
        );
        assert_eq!(Table::from_csv(&csv).unwrap(), t);
    }

    #[test]
    fn markdown_has_a_rule_under_the_header_and_escapes_pipes() {
        let mut t = Table::new(["a", "b"]);
        t.row(["x|y", "2"]);
        assert_eq!(t.markdown(), "| a | b |\n|---|---|\n| x\\|y | 2 |\n");
    }
}
