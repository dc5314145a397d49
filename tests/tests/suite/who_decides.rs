//! Who decides an approval card on Discord (issue #10, attack 1), with four people: alice owns
//! the thread, carol holds the approver role, bob talks in alice's thread (his message causes
//! the call), dave is a stranger. Only the owner or an approver decides; Always allow is the
//! owner's alone; `require_approver_for` leaves the owner only the denials; Approve all judges
//! each request on its own. Slack's twin is `who_decides_slack`.

use sandpiper::audit::{AuditFormat, report};
use sandpiper_agent::store::audit::AuditFilter;
use sandpiper_agent::store::memories::{NewMemory, Scope, Visibility};
use sandpiper_tests::both_backends;
use sandpiper_tests::discord_harness::{DiscordRig, WAIT, button, card_text, open_buttons};
use sandpiper_tests::fake_discord::{CHANNEL_ID, FakeDiscord, FakeMessage, FakeUser};
use sandpiper_tests::fake_llm::{ToolCallSpec, text, tool_call, tool_calls};
use serde_json::{Value, json};

use super::setup;

const ONCALL: u64 = 700_000_000_000_000_001;

fn alice() -> FakeUser {
    FakeUser::new(900_000_000_000_000_001, "alice")
}

fn bob() -> FakeUser {
    FakeUser::new(900_000_000_000_000_002, "bob")
}

fn carol() -> FakeUser {
    FakeUser::new(900_000_000_000_000_003, "carol").with_roles(&[ONCALL])
}

fn dave() -> FakeUser {
    FakeUser::new(900_000_000_000_000_004, "dave")
}

/// `who` clicks `label` on `card` and gets a private refusal containing `why`; the card keeps
/// its open buttons.
async fn refused(
    rig: &DiscordRig,
    thread: u64,
    card: &FakeMessage,
    who: &FakeUser,
    label: &str,
    why: &str,
) {
    let click = rig
        .fake
        .click(thread, card.id, who, &button(card, label, 0))
        .await;
    let reply: Value = rig
        .fake
        .wait_until(WAIT, "the refusal", |f| {
            f.interaction_responses(click).pop()
        })
        .await;
    assert_eq!(reply["data"]["flags"], json!(64), "private: {reply}");
    let said = reply["data"]["content"].as_str().unwrap_or_default();
    assert!(said.contains(why), "{} clicking {label}: {said}", who.name);
    let now = rig
        .fake
        .messages(thread)
        .into_iter()
        .find(|m| m.id == card.id)
        .expect("the card");
    assert_eq!(open_buttons(&now), open_buttons(card), "nothing changed");
}

const NOT_YOURS: &str = "only the person who started this thread, or an approver, can decide this";
const OWNERS_ONLY: &str = "only the person who started this thread can choose Always allow";

both_backends! {
    async fn the_participant_whose_message_caused_the_call_cannot_decide_it(db) {
        let mut s = setup(&db, vec![
            text("hello alice"),
            tool_call("c1", "bash", json!({"command": "echo from-bob"})),
            text("ran bob's"),
            tool_call("c2", "bash", json!({"command": "echo from-alice"})),
            text("ran alice's"),
            tool_call("c3", "bash", json!({"command": "echo granted"})),
            text("ran without a card"),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hi").await;
        rig.wait_text(thread, "hello alice").await;
        let key = format!("discord:{thread}");

        rig.fake.user_message(thread, &bob(), "print the environment").await;
        let card = rig.card(thread).await;
        refused(&rig, thread, &card, &bob(), "Always allow", NOT_YOURS).await;
        refused(&rig, thread, &card, &bob(), "Approve", NOT_YOURS).await;
        refused(&rig, thread, &card, &dave(), "Approve", NOT_YOURS).await;
        refused(&rig, thread, &card, &dave(), "Deny", NOT_YOURS).await;
        refused(&rig, thread, &card, &carol(), "Always allow", OWNERS_ONLY).await;
        assert_eq!(rig.agent.store().grants(&key).await.unwrap(), Vec::<String>::new());
        assert_eq!(s.llm.requests().len(), 2, "nothing ran");

        rig.fake.click(thread, card.id, &carol(), &button(&card, "Approve", 0)).await;
        rig.wait_text(thread, "ran bob's").await;
        rig.wait_message(thread, card.id, "Approved by @carol").await;
        assert_eq!(rig.agent.store().grants(&key).await.unwrap(), Vec::<String>::new());

        // alice's next bash still asks; she may choose Always allow.
        rig.fake.user_message(thread, &alice(), "now mine").await;
        let card = rig.fake.wait_until(WAIT, "a second card", |_| {
            rig.bot_messages(thread).into_iter().rev().find(|m| m.id != card.id && !open_buttons(m).is_empty())
        }).await;
        assert!(card_text(&card).contains("from-alice"), "{}", card_text(&card));
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Always allow", 0)).await;
        rig.wait_text(thread, "ran alice's").await;
        assert_eq!(rig.agent.store().grants(&key).await.unwrap(), vec!["bash".to_owned()]);

        rig.fake.user_message(thread, &alice(), "and again").await;
        rig.wait_text(thread, "ran without a card").await;
        let cards = rig.bot_messages(thread).into_iter().filter(|m| card_text(m).contains("Approval")).count();
        assert_eq!(cards, 2, "the grant skipped the third card");
        s.llm.verify();
    }

    async fn require_approver_for_leaves_the_owner_only_the_denials(db) {
        let mut s = setup(&db, vec![
            tool_call("c1", "bash", json!({"command": "echo denied-one"})),
            text("not run, fine"),
            tool_call("c2", "bash", json!({"command": "echo approved-two"})),
            text("ran two"),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        s.config.approval.require_approver_for = vec!["bash".into()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "run one").await;
        let card = rig.card(thread).await;
        refused(&rig, thread, &card, &alice(), "Approve", "`bash` needs an approver here").await;
        refused(&rig, thread, &card, &alice(), "Always allow", "`bash` needs an approver here").await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Deny", 0)).await;
        rig.wait_text(thread, "not run, fine").await;
        rig.wait_message(thread, card.id, "Denied by @alice").await;

        rig.fake.user_message(thread, &alice(), "run two").await;
        let second = rig.fake.wait_until(WAIT, "a second card", |_| {
            rig.bot_messages(thread).into_iter().rev().find(|m| m.id != card.id && !open_buttons(m).is_empty())
        }).await;
        rig.fake.click(thread, second.id, &carol(), &button(&second, "Approve", 0)).await;
        rig.wait_text(thread, "ran two").await;
        rig.wait_message(thread, second.id, "Approved by @carol").await;
        let sent = s.llm.requests()[3].to_string();
        assert!(sent.contains("approved-two"), "{sent}");
        s.llm.verify();
    }

    async fn approve_all_judges_each_request_and_says_which_were_refused(db) {
        let mut s = setup(&db, vec![
            tool_calls(vec![
                ToolCallSpec::new("c1", "bash", json!({"command": "echo guarded"})),
                ToolCallSpec::new("c2", "write_file", json!({"path": "notes.txt", "content": "hello"})),
            ]),
            text("both decided"),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        s.config.approval.require_approver_for = vec!["bash".into()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "two things").await;
        let card = rig.card(thread).await;
        let click = rig.fake.click(thread, card.id, &alice(), &button(&card, "Approve all", 0)).await;
        // The card shows the write approved; bash waits; alice is told why, privately.
        let decided = rig.wait_message(thread, card.id, "Approved by @alice").await;
        assert_eq!(card_text(&decided).matches("Approved by @alice").count(), 1, "{}", card_text(&decided));
        let private = rig.fake.wait_until(WAIT, "the private refusal", |f| {
            f.interaction_responses(click).into_iter().find(|r| r.to_string().contains("not decided"))
        }).await;
        assert_eq!(private["flags"], json!(64), "{private}");
        let said = private["content"].as_str().unwrap_or_default();
        assert!(said.contains("bash: echo guarded") && said.contains("needs an approver"), "{said}");
        assert!(!said.contains("write_file"), "{said}");
        assert_eq!(s.llm.requests().len(), 1, "the turn still waits for bash");

        // The approver's Approve all decides the rest.
        let now = rig.card(thread).await;
        rig.fake.click(thread, now.id, &carol(), &button(&now, "Approve all", 0)).await;
        rig.wait_text(thread, "both decided").await;
        let sent = s.llm.requests()[1].to_string();
        assert!(sent.contains("guarded"), "{sent}");
        s.llm.verify();
    }

    async fn a_borrowed_display_name_never_names_who_decided(db) {
        let mut s = setup(&db, vec![
            text("hello alice"),
            tool_call("c1", "bash", json!({"command": "echo from-bob"})),
            text("ran bob's"),
            tool_call("c2", "bash", json!({"command": "echo from-alice"})),
            text("ran alice's"),
        ]).await;
        s.config.discord.approver_roles = vec![ONCALL.to_string()];
        // mallory holds the approver role and calls herself "alice" on Discord.
        let mallory = FakeUser::new(900_000_000_000_000_005, "mallory").showing("alice").with_roles(&[ONCALL]);
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let thread = rig.mention(&alice(), "hi").await;
        rig.wait_text(thread, "hello alice").await;

        rig.fake.user_message(thread, &bob(), "print the environment").await;
        let card = rig.card(thread).await;
        refused(&rig, thread, &card, &bob(), "Approve", NOT_YOURS).await;
        refused(&rig, thread, &card, &dave(), "Approve", NOT_YOURS).await;
        rig.fake.click(thread, card.id, &mallory, &button(&card, "Approve", 0)).await;
        rig.wait_text(thread, "ran bob's").await;
        let decided = rig.wait_message(thread, card.id, "Approved by").await;
        assert!(card_text(&decided).contains("Approved by alice (@mallory)"), "{}", card_text(&decided));

        rig.fake.user_message(thread, &alice(), "now mine").await;
        let card = rig.card(thread).await;
        rig.fake.click(thread, card.id, &alice(), &button(&card, "Always allow", 0)).await;
        rig.wait_text(thread, "ran alice's").await;
        rig.wait_message(thread, card.id, "Always allowed by @alice").await;

        // The audit names each person by a name no one can borrow, with their id; asking for
        // alice finds alice's events only, never mallory's.
        let store = rig.agent.store();
        let ids = async |handle: &str| {
            store.users_with_handle(handle).await.unwrap().pop().map(|(_, u)| u.id).expect(handle)
        };
        let (alice_id, mallory_id, bob_id) = (ids("alice").await, ids("mallory").await, ids("bob").await);
        let rows = async |user: &str| {
            let filter = AuditFilter { user: Some(user.into()), ..AuditFilter::default() };
            let text = report(store, &filter, AuditFormat::Jsonl).await.unwrap();
            text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect::<Vec<_>>()
        };
        let who = |rows: &[Value]| -> Vec<(String, String, String)> {
            rows.iter().map(|e| (
                e["kind"].as_str().unwrap_or_default().to_owned(),
                e["actor"].as_str().unwrap_or_default().to_owned(),
                e["actor_id"].as_str().unwrap_or_default().to_owned(),
            )).collect()
        };
        let row = |k: &str, a: &str, id: &str| (k.to_owned(), a.to_owned(), id.to_owned());
        assert_eq!(who(&rows("mallory").await), vec![row("decided", "alice (@mallory)", &mallory_id)]);
        assert_eq!(who(&rows("alice").await), vec![
            row("requested", "@alice", &alice_id),
            row("decided", "@alice", &alice_id),
            row("grant_created", "@alice", &alice_id),
        ]);
        assert_eq!(who(&rows(&bob_id).await), vec![row("requested", "@bob", &bob_id)]);
        let table = report(store, &AuditFilter::default(), AuditFormat::Table).await.unwrap();
        assert!(table.contains("alice (@mallory)") && table.contains(&mallory_id), "{table}");
        let grants = rig.agent.grants_of(&format!("discord:{thread}")).await.unwrap();
        assert_eq!(grants.iter().map(|g| g.granted_by.as_deref()).collect::<Vec<_>>(), vec![Some("@alice")]);
        s.llm.verify();
    }
}

const ADMINS: u64 = 700_000_000_000_000_009;

both_backends! {
    async fn deleting_a_global_memory_needs_an_admin(db) {
        let mut s = setup(&db, vec![]).await;
        s.config.discord.admin_roles = vec![ADMINS.to_string()];
        let rig = DiscordRig::start(FakeDiscord::start().await, s.config.clone()).await;
        let store = rig.agent.store();
        let bob_id = store.user_for_identity("discord", &bob().id.to_string(), "bob").await.unwrap().id;
        let vis = Visibility { workstream: "none".into(), user_id: Some(bob_id) };
        for (name, scope) in [("team_rule", Scope::Global), ("other_rule", Scope::Global), ("bob_pref", Scope::User)] {
            let memory = NewMemory { name, scope, kind: None, description: None, content: "x", created_by: None };
            store.save_memory(&vis, &memory).await.unwrap();
        }
        let delete = |name: &str| json!([{"name": "action", "type": 3, "value": "delete"}, {"name": "name", "type": 3, "value": name}]);
        let fake = rig.fake.clone();
        let said = |id: u64| {
            let fake = fake.clone();
            async move {
                let reply: Value = fake.wait_until(WAIT, "the memory answer", |f| f.interaction_responses(id).pop()).await;
                assert_eq!(reply["data"]["flags"], json!(64), "{reply}");
                reply["data"]["content"].as_str().unwrap_or_default().to_owned()
            }
        };
        let refused = rig.fake.slash(CHANNEL_ID, &bob(), "memory", delete("team_rule")).await;
        assert!(said(refused).await.contains("needs an admin"));
        // One's own memories stay one's own to delete.
        let own = rig.fake.slash(CHANNEL_ID, &bob(), "memory", delete("bob_pref")).await;
        assert!(said(own).await.contains("deleted `bob_pref`"));
        assert_eq!(store.named_memories(&vis, "team_rule", None).await.unwrap().len(), 1);

        let by_role = FakeUser::new(900_000_000_000_000_005, "erin").with_roles(&[ADMINS]);
        let deleted = rig.fake.slash(CHANNEL_ID, &by_role, "memory", delete("team_rule")).await;
        assert!(said(deleted).await.contains("deleted `team_rule`"));
        let by_permission = FakeUser::new(900_000_000_000_000_006, "frank").as_admin();
        let deleted = rig.fake.slash(CHANNEL_ID, &by_permission, "memory", delete("other_rule")).await;
        assert!(said(deleted).await.contains("deleted `other_rule`"));
        assert!(store.visible_memories(&vis, 10).await.unwrap().is_empty());
    }
}
