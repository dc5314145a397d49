//! llama.cpp's slots: a server started with `--parallel N` keeps N prompts in its cache, one
//! per slot, and a request it places itself may land on the slot another conversation's
//! prompt is in, throwing that prompt away. With several slots each request names its own
//! (`id_slot`): a workstream always uses the same one, and the calls made for it (its
//! compaction summary, its sub-agents) use another, so they never evict it.
//!
//! Pure: [`total_slots`] reads `/props`, [`slot_for`] places a request; [`super::OpenAiModel`]
//! asks the server and sends the slot.

use serde_json::Value;

use crate::model::CacheKey;
use crate::workstream::WorkstreamKey;

/// The slots a llama.cpp server says it has in `/props` (`total_slots`).
pub(super) fn total_slots(props: &Value) -> Option<u32> {
    props
        .get("total_slots")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0)
}

/// The slot for a request of `key` on a server with `slots` slots; `None` with one slot
/// (there is nothing to choose). The same key gets the same slot in every process, so a
/// conversation finds its prompt after a restart or on another node:
/// - a top-level workstream's conversation: its home slot, from a hash of its key;
/// - a sub-agent's conversation: a slot other than its top-level workstream's home, the same
///   for all its calls;
/// - a call aside (a compaction summary): a slot other than its workstream's home.
pub(super) fn slot_for(key: CacheKey<'_>, slots: u32) -> Option<u32> {
    if slots < 2 {
        return None;
    }
    let workstream = key.workstream();
    let root = match workstream.parse::<WorkstreamKey>() {
        Ok(parsed) => parsed.root().to_string(),
        Err(_) => workstream.to_owned(),
    };
    let home = fnv1a(&root) % u64::from(slots);
    let own_conversation = matches!(key, CacheKey::Conversation(_)) && root == workstream;
    let slot = if own_conversation {
        home
    } else {
        // One of the other slots, spread by the key so that several sub-agents do not all
        // share one.
        (home + 1 + fnv1a(workstream) % u64::from(slots - 1)) % u64::from(slots)
    };
    u32::try_from(slot).ok()
}

/// FNV-1a (64 bit): a hash that is the same in every process and every Rust release, unlike
/// `std`'s, so that two nodes put a workstream on the same slot.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn props_say_the_slots() {
        assert_eq!(total_slots(&json!({"total_slots": 4})), Some(4));
        assert_eq!(total_slots(&json!({"total_slots": 0})), None);
        assert_eq!(total_slots(&json!({"n_ctx": 4096})), None);
    }

    #[test]
    fn one_slot_is_never_named() {
        assert_eq!(slot_for(CacheKey::Conversation("console:a"), 1), None);
        assert_eq!(slot_for(CacheKey::Aside("console:a"), 1), None);
    }

    #[test]
    fn a_workstream_keeps_its_slot_and_its_side_calls_go_elsewhere() {
        for slots in 2..6 {
            for key in [
                "console:a",
                "discord:42",
                "slack:T1:C1:1700000000.1",
                "not a key",
            ] {
                let home = slot_for(CacheKey::Conversation(key), slots).expect("a slot");
                assert!(home < slots);
                assert_eq!(slot_for(CacheKey::Conversation(key), slots), Some(home));
                let aside = slot_for(CacheKey::Aside(key), slots).expect("a slot");
                assert!(aside != home && aside < slots, "{key}: {aside} vs {home}");
                for call in ["c1", "c2", "c3"] {
                    let child = format!("{key}/task:{call}");
                    let sub = slot_for(CacheKey::Conversation(&child), slots).expect("a slot");
                    if key != "not a key" {
                        assert!(sub != home && sub < slots, "{child}: {sub} vs {home}");
                    }
                    assert_eq!(slot_for(CacheKey::Conversation(&child), slots), Some(sub));
                }
            }
        }
    }

    #[test]
    fn the_mapping_does_not_change_between_releases() {
        // Two nodes, or an old and a new binary, must agree on where a workstream lives.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        let slots: Vec<Option<u32>> = ["console:a", "console:b", "discord:1", "discord:2"]
            .into_iter()
            .map(|key| slot_for(CacheKey::Conversation(key), 2))
            .collect();
        assert_eq!(slots, vec![Some(1), Some(0), Some(0), Some(1)]);
    }
}
