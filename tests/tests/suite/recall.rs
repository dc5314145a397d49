//! The `recall` tool end to end: a user recalls their own conversations and never another
//! user's, on both databases; and the two search paths (FTS5, tsvector) agree.

use sandpiper_agent::model::{Message, ToolCall};
use sandpiper_agent::store::recall::RecallHit;
use sandpiper_agent::store::{Store, StoreError};
use sandpiper_tests::both_backends;
use sandpiper_tests::fake_llm::{text, tool_call};
use sandpiper_tests::harness::{self, ConsoleRun};
use serde_json::json;

use super::{WAIT, contents_with_role, setup};

const SECRET: &str = "the purple-elephant deploy key lives in vault path ops/pe-4411";

fn places(hits: &[RecallHit]) -> Vec<(&str, i64)> {
    hits.iter()
        .map(|h| (h.workstream.as_str(), h.seq))
        .collect()
}

both_backends! {
    async fn a_user_recalls_their_own_threads_and_never_another_users(db) {
        let s = setup(&db, vec![
            text("Noted."),
            tool_call("c1", "recall", json!({"query": "purple elephant"})),
            text("I cannot find that in your conversations."),
            tool_call("c2", "recall", json!({"query": "purple elephant"})),
            text("It is in vault path ops/pe-4411."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        let alice = ConsoleRun::start(agent.clone(), "alice-ops", "alice", false);
        alice.send(&format!("remember: {SECRET}")).await;
        alice.finish().await;

        // Bob, in his own thread, asks; the tool runs without asking anyone.
        let bob = ConsoleRun::start(agent.clone(), "bob-ops", "bob", false);
        bob.send("where is the purple elephant key?").await;
        let out = bob.finish().await;
        assert!(out.contains("I cannot find that"), "{out}");
        assert!(!out.contains("approve recall"), "{out}");
        let requests = s.llm.requests();
        let bobs = contents_with_role(&requests[2], "tool");
        assert_eq!(bobs.len(), 1, "{bobs:?}");
        assert!(!bobs[0].contains("deploy key"), "bob recalled alice's thread: {bobs:?}");
        assert!(!bobs[0].contains("alice-ops"), "{bobs:?}");
        // What he does see is his own thread.
        assert!(
            bobs[0].contains("[console:bob-ops · ") && bobs[0].contains(" · user] where is the purple elephant key?"),
            "{bobs:?}"
        );

        // Alice, in a new thread, finds it, with the workstream it came from.
        let alice = ConsoleRun::start(agent.clone(), "alice-new", "alice", false);
        alice.send("where did we put the purple elephant key?").await;
        alice.wait_for("ops/pe-4411.", WAIT).await;
        alice.finish().await;
        let requests = s.llm.requests();
        let alices = contents_with_role(&requests[4], "tool");
        assert_eq!(alices.len(), 1, "{alices:?}");
        assert!(alices[0].contains("[console:alice-ops · "), "{alices:?}");
        assert!(alices[0].contains(&format!(" · user] remember: {SECRET}")), "{alices:?}");
        assert!(!alices[0].contains("bob-ops"), "{alices:?}");
        s.llm.verify();
    }

    async fn a_query_of_only_special_characters_is_a_clear_error(db) {
        let s = setup(&db, vec![
            tool_call("c1", "recall", json!({"query": "\"*\" (-) ^: <-> !"})),
            text("I need words to search for."),
        ]).await;
        let agent = harness::agent(s.config.clone()).await;
        for query in ["\"*\" (-)", "' & | ! <-> :*", "   "] {
            let err = agent.store().recall(query, Some("alice"), "console:x", 20).await.unwrap_err();
            assert!(matches!(&err, StoreError::EmptyQuery(q) if q == query), "{err}");
        }
        let console = ConsoleRun::start(agent, "odd", "alice", false);
        console.send("search for punctuation").await;
        console.finish().await;
        let tool = contents_with_role(&s.llm.requests()[1], "tool");
        assert!(
            tool[0].contains("nothing to search for") && tool[0].contains("at least one word"),
            "{tool:?}"
        );
        s.llm.verify();
    }

    async fn both_search_paths_find_the_same_messages(db) {
        let store = Store::connect(&db.url, 2).await.unwrap();
        let say = async |ws: &str, seq: i64, msg: Message, author: Option<&str>| {
            store.ensure_workstream(ws, author).await.unwrap();
            store.append_message(ws, seq, &msg, author).await.unwrap();
        };
        say("a", 0, Message::user("restart NGINX on web-01, then check /etc/nginx/nginx.conf"), Some("al")).await;
        let mut call = Message::assistant("");
        call.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: json!({"path": "/srv/café/deploy.toml"}).to_string(),
        });
        say("a", 1, call, None).await;
        say("a", 2, Message::tool_result("c1", "read_file", "[deploy]\nregion = eu-west-1"), None).await;
        say("b", 0, Message::user("web-01 is private to bo"), Some("bo")).await;
        let find = async |q: &str| places(&store.recall(q, Some("al"), "c", 20).await.unwrap())
            .into_iter().map(|(w, s)| format!("{w}{s}")).collect::<Vec<_>>();
        assert_eq!(find("nginx").await, ["a0"]);
        assert_eq!(find("hosts nginx.conf").await, ["a0"], "any-word fallback");
        assert_eq!(find("web-01 restart").await, ["a0"]);
        assert_eq!(find("01 web").await, ["a0"]);
        assert_eq!(find("read_file deploy.toml").await, ["a1"]);
        assert_eq!(find("eu-west-1").await, ["a2"]);
        assert_eq!(find("EU west").await, ["a2"]);
        assert_eq!(find("café").await, ["a1"]);
        assert_eq!(find("west-eu").await, Vec::<String>::new(), "a term is a phrase");
        assert_eq!(find("regio*").await, ["a2"]);
        assert_eq!(find("web-0*").await, ["a0"]);
        assert_eq!(find("regio").await, Vec::<String>::new(), "no stemming, a prefix needs *");
        // Operators are text, on both backends.
        for query in ["nginx\" OR \"x", "nginx:*", "!nginx", "nginx & | <->", "'nginx'", "(nginx", "nginx\\"] {
            assert_eq!(find(query).await, ["a0"], "{query}");
        }
        let hits = store.recall("region", Some("al"), "c", 20).await.unwrap();
        assert_eq!(hits[0].snippet, "read_file: [deploy] region = eu-west-1");
        assert_eq!(hits[0].role, "tool");
        store.close().await;
    }
}
