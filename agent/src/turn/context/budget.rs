//! What fits in a context window: how large a prompt may grow before the conversation is
//! compacted, and the output limit each request sends.

use super::ContextWindow;

/// The fewest tokens an answer is given; a request that cannot leave this much is too large.
pub const MIN_ANSWER: u64 = 128;

/// The limits of one model's requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// The context window in tokens.
    pub window: u64,
    /// `[model] max_tokens`: the most an answer may use.
    pub output_cap: u32,
    /// `[agent] compact_threshold`: the share of the window a prompt may fill.
    pub threshold: f64,
}

impl Budget {
    /// The budget of `window` with the configured output cap and threshold.
    pub fn new(window: &ContextWindow, output_cap: u32, threshold: f64) -> Self {
        Self {
            window: window.tokens,
            output_cap,
            threshold,
        }
    }

    /// Room kept free for the answer when deciding whether a prompt fits: the output cap, but
    /// never more than a quarter of the window (a small local model would otherwise have no
    /// room for a prompt at all).
    pub fn reserve(&self) -> u64 {
        u64::from(self.output_cap).min(self.window / 4)
    }

    /// The most prompt tokens a request may have before the conversation is compacted.
    pub fn prompt_budget(&self) -> u64 {
        let by_threshold = (self.window as f64 * self.threshold) as u64;
        self.window.saturating_sub(self.reserve()).min(by_threshold)
    }

    /// Tokens kept free for the estimate's own error.
    fn margin(&self) -> u64 {
        self.window / 50 + 32
    }

    /// The output limit of a request whose prompt is estimated at `prompt` tokens: the cap,
    /// or what the window leaves. `None` when it leaves less than [`MIN_ANSWER`].
    pub fn output_limit(&self, prompt: u64) -> Option<u32> {
        let room = self
            .window
            .saturating_sub(prompt)
            .saturating_sub(self.margin());
        if room < MIN_ANSWER {
            return None;
        }
        Some(u32::try_from(room).unwrap_or(u32::MAX).min(self.output_cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn budget(window: u64, cap: u32) -> Budget {
        Budget {
            window,
            output_cap: cap,
            threshold: 0.8,
        }
    }

    #[test]
    fn the_prompt_budget_keeps_room_for_the_answer() {
        let cases = [
            // window, cap → budget: the threshold or the window less the answer's room.
            (128_000, 8192, 102_400),
            (8192, 8192, 6144),
            (4096, 8192, 3072),
            (4096, 512, 3276),
            (2048, 256, 1638),
        ];
        let got: Vec<_> = cases
            .iter()
            .map(|(w, c, _)| (*w, *c, budget(*w, *c).prompt_budget()))
            .collect();
        let want: Vec<_> = cases.iter().map(|(w, c, b)| (*w, *c, *b)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_output_limit_never_exceeds_what_the_window_leaves() {
        let b = budget(4096, 8192);
        assert_eq!(b.output_limit(1000), Some(4096 - 1000 - 113));
        assert_eq!(budget(128_000, 8192).output_limit(1000), Some(8192));
        assert_eq!(b.output_limit(4000), None);
        assert_eq!(b.output_limit(9000), None);
    }
}
