//! Where OpenAI-compatible servers say their context window, each family in its own place:
//! llama.cpp's `/props`, the model's entry in `/v1/models` (vLLM, OpenRouter, Together), LM
//! Studio's `/api/v0/models` and Ollama's `/api/show`. Most hosted APIs say nothing.
//!
//! Pure readers of what the servers answered; [`super::OpenAiModel`] asks.

use serde_json::Value;

/// llama.cpp's `/props`: the slot's `n_ctx`, which is what one request may fill.
pub(super) fn llama_props(props: &Value) -> Option<u64> {
    props
        .pointer("/default_generation_settings/n_ctx")
        .or_else(|| props.get("n_ctx"))
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
}

/// The window in `model`'s entry of a `/v1/models` listing: `max_model_len` (vLLM),
/// `context_length` (OpenRouter, Together, whose listing is a bare array) or
/// `context_window`.
pub(super) fn models_listing(listing: &Value, model: &str) -> Option<(u64, &'static str)> {
    let entry = entry_of(listing, model)?;
    [
        ("max_model_len", "/models max_model_len"),
        ("context_length", "/models context_length"),
        ("context_window", "/models context_window"),
    ]
    .into_iter()
    .find_map(|(field, what)| positive(entry.get(field)).map(|n| (n, what)))
}

/// LM Studio's `/api/v0/models`: the length the model is loaded with, else the most it can
/// take.
pub(super) fn lm_studio(listing: &Value, model: &str) -> Option<(u64, &'static str)> {
    let entry = entry_of(listing, model)?;
    positive(entry.get("loaded_context_length"))
        .map(|n| (n, "LM Studio's loaded_context_length"))
        .or_else(|| {
            positive(entry.get("max_context_length")).map(|n| (n, "LM Studio's max_context_length"))
        })
}

/// Ollama's `/api/show`: the model's `num_ctx` parameter (what Ollama runs it with) when its
/// Modelfile sets one, else the length it was trained for (`model_info`'s
/// `<family>.context_length`).
pub(super) fn ollama_show(show: &Value) -> Option<(u64, &'static str)> {
    let num_ctx = show
        .get("parameters")
        .and_then(Value::as_str)
        .into_iter()
        .flat_map(str::lines)
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx")).then(|| words.next()?.parse::<u64>().ok())?
        })
        .filter(|n| *n > 0);
    if let Some(n) = num_ctx {
        return Some((n, "Ollama's num_ctx"));
    }
    let info = show.get("model_info")?.as_object()?;
    info.iter()
        .find(|(key, _)| key.ends_with(".context_length"))
        .and_then(|(_, value)| positive(Some(value)))
        .map(|n| (n, "Ollama's model_info context_length"))
}

/// The entry of `model` in a listing (`{"data": [...]}` or a bare array), or the only entry.
fn entry_of<'a>(listing: &'a Value, model: &str) -> Option<&'a Value> {
    let entries = listing.get("data").unwrap_or(listing).as_array()?;
    entries
        .iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(model))
        .or_else(|| entries.first().filter(|_| entries.len() == 1))
}

fn positive(value: Option<&Value>) -> Option<u64> {
    value.and_then(Value::as_u64).filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn each_family_is_read_where_it_says_its_window() {
        let llama = json!({"default_generation_settings": {"n_ctx": 16384}});
        assert_eq!(llama_props(&llama), Some(16384));
        let vllm = json!({"data": [{"id": "m", "max_model_len": 32768}]});
        assert_eq!(
            models_listing(&vllm, "m"),
            Some((32768, "/models max_model_len"))
        );
        let openrouter = json!({"data": [
            {"id": "a/other", "context_length": 8000},
            {"id": "meta-llama/llama-3.1-8b-instruct", "context_length": 131072,
             "top_provider": {"context_length": 16384}},
        ]});
        assert_eq!(
            models_listing(&openrouter, "meta-llama/llama-3.1-8b-instruct"),
            Some((131072, "/models context_length"))
        );
        let together = json!([
            {"id": "Qwen/Qwen2.5-7B-Instruct-Turbo", "type": "chat", "context_length": 32768},
            {"id": "other", "context_length": 4096},
        ]);
        assert_eq!(
            models_listing(&together, "Qwen/Qwen2.5-7B-Instruct-Turbo"),
            Some((32768, "/models context_length"))
        );
        let lm = json!({"object": "list", "data": [
            {"id": "qwen2.5-7b-instruct", "state": "loaded", "max_context_length": 32768,
             "loaded_context_length": 4096},
            {"id": "gemma-3-4b", "state": "not-loaded", "max_context_length": 131072},
        ]});
        assert_eq!(
            lm_studio(&lm, "qwen2.5-7b-instruct"),
            Some((4096, "LM Studio's loaded_context_length"))
        );
        assert_eq!(
            lm_studio(&lm, "gemma-3-4b"),
            Some((131072, "LM Studio's max_context_length"))
        );
        let ollama = json!({
            "parameters": "stop                           \"<end_of_turn>\"\nnum_ctx                        8192\ntemperature                    1",
            "model_info": {"general.architecture": "gemma3", "gemma3.context_length": 131072},
        });
        assert_eq!(ollama_show(&ollama), Some((8192, "Ollama's num_ctx")));
        let trained = json!({"model_info": {"llama.context_length": 131072}});
        assert_eq!(
            ollama_show(&trained),
            Some((131072, "Ollama's model_info context_length"))
        );
    }

    #[test]
    fn a_listing_that_does_not_say_says_nothing() {
        let openai = json!({"data": [{"id": "gpt-x"}, {"id": "gpt-y"}]});
        assert_eq!(models_listing(&openai, "gpt-x"), None);
        // Several models and none of them ours: not a guess at which.
        let many =
            json!({"data": [{"id": "a", "context_length": 1}, {"id": "b", "context_length": 2}]});
        assert_eq!(models_listing(&many, "c"), None);
        assert_eq!(ollama_show(&json!({"parameters": "num_ctx 0"})), None);
        assert_eq!(llama_props(&json!({"n_ctx": 0})), None);
    }
}
