//! A context window for the fake, enforced the way real servers enforce theirs, so tests of
//! long workstreams meet the limits (and the exact error bodies) that real servers have.
//!
//! The fake counts a request's tokens as a quarter of the bytes of its messages, system
//! message and tools as JSON (a stand-in tokenizer; sandpiper only sees the counts it reports
//! in `usage` and in its errors, as with a real server).

use serde_json::{Value, json};

use super::script::StreamedReply;

/// Which server's behaviour and error bodies the window follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// OpenAI: prompt plus `max_completion_tokens`/`max_tokens` may not pass the window;
    /// 400 `context_length_exceeded`. Its `/v1/models` does not say the window.
    OpenAi,
    /// llama.cpp's server: a prompt of the window or more is refused (400
    /// `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`); the answer stops at
    /// the window; tool call arguments in the history must be JSON (HTTP 500 otherwise);
    /// `GET /props` says the window.
    LlamaCpp,
    /// vLLM: prompt plus the output limit may not pass `max_model_len`, which `/v1/models`
    /// says; 400 "This model's maximum context length is …".
    Vllm,
    /// Anthropic: a prompt larger than the window is refused (400 "prompt is too long").
    Anthropic,
    /// Ollama: never refuses a long prompt (it drops the start of it to fit `num_ctx`);
    /// `POST /api/show` says `num_ctx` in the model's `parameters`.
    Ollama,
    /// LM Studio: `GET /api/v0/models` says `max_context_length` and, for a loaded model,
    /// `loaded_context_length`; a long prompt is cut to fit, not refused.
    LmStudio,
}

/// A context window the fake enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLimit {
    /// Tokens of prompt and answer together.
    pub n_ctx: u64,
    /// Whose behaviour.
    pub flavor: Flavor,
}

impl ContextLimit {
    /// A window of `n_ctx` tokens behaving like `flavor`.
    pub fn new(n_ctx: u64, flavor: Flavor) -> Self {
        Self { n_ctx, flavor }
    }
}

/// What the fake counts as tokens of `text`.
pub fn tokens_of(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The prompt tokens of a request body (either protocol).
pub fn prompt_tokens(body: &Value) -> u64 {
    let part = |key: &str| {
        body.get(key).map_or(0, |v| match v {
            Value::String(s) => s.len(),
            other => other.to_string().len(),
        })
    };
    ((part("messages") + part("system") + part("tools")) as u64).div_ceil(4)
}

/// The output limit a request asked for, if any.
pub fn output_limit(body: &Value) -> Option<u64> {
    body.get("max_completion_tokens")
        .or_else(|| body.get("max_tokens"))
        .and_then(Value::as_u64)
}

/// Why the fake refuses a request: HTTP status and the server's JSON body.
pub fn refusal(limit: &ContextLimit, body: &Value) -> Option<(u16, Value)> {
    let prompt = prompt_tokens(body);
    let asked = output_limit(body).unwrap_or(0);
    let n_ctx = limit.n_ctx;
    match limit.flavor {
        Flavor::LlamaCpp => {
            if let Some(bad) = unparsable_arguments(body) {
                return Some((
                    500,
                    json!({"error": {"code": 500, "message": format!(
                        "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1, column {}: syntax error while parsing value",
                        bad.len()
                    ), "type": "server_error"}}),
                ));
            }
            (prompt >= n_ctx).then(|| {
                (
                    400,
                    json!({"error": {
                        "code": 400,
                        "message": format!("request ({prompt} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"),
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": prompt,
                        "n_ctx": n_ctx,
                    }}),
                )
            })
        }
        Flavor::OpenAi => (prompt + asked > n_ctx).then(|| {
            (
                400,
                json!({"error": {
                    "message": format!("This model's maximum context length is {n_ctx} tokens. However, your messages resulted in {prompt} tokens. Please reduce the length of the messages."),
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }}),
            )
        }),
        Flavor::Vllm => (prompt + asked > n_ctx).then(|| {
            (
                400,
                json!({
                    "object": "error",
                    "message": format!("This model's maximum context length is {n_ctx} tokens. However, you requested {} tokens ({prompt} in the messages, {asked} in the completion). Please reduce the length of the messages or completion.", prompt + asked),
                    "type": "BadRequestError",
                    "param": null,
                    "code": 400,
                }),
            )
        }),
        Flavor::Ollama | Flavor::LmStudio => None,
        Flavor::Anthropic => (prompt > n_ctx).then(|| {
            (
                400,
                json!({"type": "error", "error": {
                    "type": "invalid_request_error",
                    "message": format!("prompt is too long: {prompt} tokens > {n_ctx} maximum"),
                }}),
            )
        }),
    }
}

/// The first tool-call argument text in an OpenAI history that is not JSON.
fn unparsable_arguments(body: &Value) -> Option<String> {
    body.get("messages")?
        .as_array()?
        .iter()
        .filter_map(|m| m.get("tool_calls").and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.pointer("/function/arguments").and_then(Value::as_str))
        .find(|a| serde_json::from_str::<Value>(a).is_err())
        .map(str::to_owned)
}

/// Applies the window to an answer: reports the prompt's real size and cuts the text at the
/// output limit (or where the window ends), as the server would.
pub fn apply(limit: &ContextLimit, body: &Value, reply: &mut StreamedReply) {
    let prompt = prompt_tokens(body);
    let room = limit.n_ctx.saturating_sub(prompt);
    let max = output_limit(body).map_or(room, |m| m.min(room));
    let mut used = 0u64;
    let mut kept = Vec::new();
    for chunk in &reply.text_chunks {
        let t = tokens_of(chunk);
        if used + t > max {
            let bytes = usize::try_from((max - used) * 4).unwrap_or(usize::MAX);
            let mut end = bytes.min(chunk.len());
            while !chunk.is_char_boundary(end) {
                end -= 1;
            }
            if end > 0 {
                kept.push(chunk[..end].to_owned());
            }
            reply.cut_off = true;
            used = max;
            break;
        }
        used += t;
        kept.push(chunk.clone());
    }
    if reply.cut_off {
        reply.text_chunks = kept;
        reply.tool_calls.clear();
    }
    reply.usage.input_tokens = prompt;
    reply.usage.output_tokens = used.max(1);
}

/// `GET /props` of a llama.cpp server with this window.
pub fn props(limit: &ContextLimit) -> Option<Value> {
    (limit.flavor == Flavor::LlamaCpp).then(|| {
        json!({
            "default_generation_settings": {"n_ctx": limit.n_ctx, "params": {"n_predict": -1}},
            "total_slots": 1,
            "model_path": "fake.gguf",
            "chat_template": "",
        })
    })
}

/// llama.cpp's `/props` (of the enforced window, else a 4096-token one) with `slots` slots.
pub fn with_slots(enforced: Option<Value>, slots: u32) -> Value {
    let mut answer = enforced
        .or_else(|| props(&ContextLimit::new(4096, Flavor::LlamaCpp)))
        .unwrap_or_else(|| json!({}));
    answer["total_slots"] = json!(slots);
    answer
}

/// `GET /v1/models` with this window where the flavor says it.
pub fn models(limit: Option<&ContextLimit>) -> Value {
    let mut entry = json!({"id": "fake-model", "object": "model", "owned_by": "fake"});
    if let Some(limit) = limit {
        match limit.flavor {
            Flavor::Vllm => entry["max_model_len"] = json!(limit.n_ctx),
            Flavor::LlamaCpp => entry["meta"] = json!({"n_ctx_train": 32768}),
            Flavor::OpenAi | Flavor::Anthropic | Flavor::Ollama | Flavor::LmStudio => {}
        }
    }
    json!({"object": "list", "data": [entry]})
}

/// `POST /api/show` of an Ollama server with this window.
pub fn ollama_show(limit: &ContextLimit) -> Option<Value> {
    (limit.flavor == Flavor::Ollama).then(|| {
        json!({
            "parameters": format!("num_ctx                        {}\nstop                           \"<end_of_turn>\"", limit.n_ctx),
            "model_info": {"general.architecture": "gemma3", "gemma3.context_length": 131072},
            "capabilities": ["completion", "tools"],
        })
    })
}

/// `GET /api/v0/models` of LM Studio with this window, the model loaded with it.
pub fn lm_studio_models(limit: &ContextLimit) -> Option<Value> {
    (limit.flavor == Flavor::LmStudio).then(|| {
        json!({"object": "list", "data": [{
            "id": "fake-model", "object": "model", "type": "llm", "state": "loaded",
            "max_context_length": 131072, "loaded_context_length": limit.n_ctx,
        }]})
    })
}
