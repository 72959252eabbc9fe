//! The `Warning` headers of one response, kept as kube-apiserver's
//! recorder keeps them (`k8s.io/apiserver/pkg/endpoints/filters/warning.go`):
//! each text once; once the texts pass 4,096 characters in all, every text
//! is cut to 256 characters and no more are kept past 4,096. Warnings come
//! from admission webhooks, which anyone allowed to register one chooses.

/// Characters of warnings a response carries before they are cut.
pub(crate) const TOTAL_CHARS: usize = 4096;
/// Characters a warning keeps once they are cut.
pub(crate) const ITEM_CHARS: usize = 256;

/// The warnings of one response.
#[derive(Debug, Default)]
pub(crate) struct Warnings {
    /// What the response carries, in order.
    kept: Vec<String>,
    written: usize,
    cutting: bool,
}

impl Warnings {
    /// Records `text` for the response.
    pub(crate) fn add(&mut self, text: String) {
        if self.cutting {
            if self.written >= TOTAL_CHARS {
                return;
            }
            let text = cut(&text);
            if !self.kept.contains(&text) {
                self.written += text.chars().count();
                self.kept.push(text);
            }
            return;
        }
        if self.kept.contains(&text) {
            return;
        }
        let chars = text.chars().count();
        if self.written + chars <= TOTAL_CHARS {
            self.written += chars;
            self.kept.push(text);
            return;
        }
        // Past the total: every text is cut, the earlier ones again from
        // the start.
        self.cutting = true;
        self.written = 0;
        let earlier = std::mem::take(&mut self.kept);
        for text in earlier.into_iter().chain(std::iter::once(text)) {
            self.add(text);
        }
    }

    /// What the response carries, in order; the recorder is left empty.
    pub(crate) fn take(&mut self) -> Vec<String> {
        std::mem::take(self).kept
    }
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(ITEM_CHARS) {
        Some((end, _)) => text[..end].to_string(),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_kept_once_and_cut_past_their_total() {
        let mut w = Warnings::default();
        w.add("a".into());
        w.add("a".into());
        w.add("é".repeat(300));
        assert_eq!(w.take(), vec!["a".to_string(), "é".repeat(300)]);

        // Past 4,096 characters: every text cut to 256, and none past the total.
        for i in 0..1000 {
            w.add(format!("{i:04}{}", "x".repeat(1000)));
        }
        let kept = w.take();
        let total: usize = kept.iter().map(|t| t.chars().count()).sum();
        assert!(kept.iter().all(|t| t.chars().count() == ITEM_CHARS));
        assert_eq!(kept.len(), TOTAL_CHARS / ITEM_CHARS);
        assert_eq!(total, TOTAL_CHARS);
        assert!(kept[0].starts_with("0000"));
        assert!(w.take().is_empty());
    }
}
