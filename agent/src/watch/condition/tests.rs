use pretty_assertions::assert_eq;
use proptest::prelude::*;

use super::*;

fn poll(output: &str) -> Poll<'_> {
    Poll {
        output,
        exit_code: 0,
        prev_output: None,
    }
}

fn holds(condition: &str, p: &Poll<'_>) -> bool {
    Condition::compile(condition)
        .unwrap_or_else(|e| panic!("{condition}: {e}"))
        .holds(p)
        .unwrap_or_else(|e| panic!("{condition}: {e}"))
}

#[test]
fn the_reference_examples_work_unchanged() {
    let merged = poll(r#"{"state": "MERGED", "mergedAt": "2026-12-01T10:00:00Z"}"#);
    let open = poll(r#"{"state": "OPEN", "mergedAt": null}"#);
    assert!(holds(r#"data["state"] == "MERGED""#, &merged));
    assert!(!holds(r#"data["state"] == "MERGED""#, &open));
    assert!(holds(r#"data.get("mergedAt") is not None"#, &merged));
    assert!(!holds(r#"data.get("mergedAt") is not None"#, &open));
    assert!(holds(r#""error" in output"#, &poll("build error: x")));
    assert!(!holds(r#""error" in output"#, &poll("ok")));
    let failed = Poll {
        output: "",
        exit_code: 2,
        prev_output: None,
    };
    assert!(holds("exit_code != 0", &failed));
    assert!(!holds("exit_code != 0", &poll("")));
    let became_ready = Poll {
        output: "Service READY",
        exit_code: 0,
        prev_output: Some("starting"),
    };
    let still_ready = Poll {
        prev_output: Some("Service READY"),
        ..became_ready.clone()
    };
    assert!(holds(
        r#"changed and "ready" in output.lower()"#,
        &became_ready
    ));
    assert!(!holds(
        r#"changed and "ready" in output.lower()"#,
        &still_ready
    ));
    // The first poll has no previous output: changed is true, prev_output is None.
    assert!(holds("changed and prev_output is None", &poll("x")));
}

#[test]
fn the_whitelisted_language_computes_like_python() {
    let p =
        poll(r#"{"checks": [{"name": "ci", "ok": true}, {"name": "lint", "ok": false}], "n": 7}"#);
    for (condition, expected) in [
        ("1 < data['n'] <= 7", true),
        ("1 < data['n'] < 7", false),
        (
            "len(data['checks']) == 2 and data['checks'][-1]['name'] == 'lint'",
            true,
        ),
        (
            "not all([data['checks'][0]['ok'], data['checks'][1]['ok']])",
            true,
        ),
        ("any([True, False]) and not all([True, False])", true),
        (
            "data['n'] // 2 == 3 and data['n'] % 4 == 3 and -7 // 2 == -4 and -7 % 2 == 1",
            true,
        ),
        ("data['n'] / 2 == 3.5 and 2 ** 10 == 1024", true),
        (
            "sorted([3, 1, 2]) == [1, 2, 3] and min(4, 2, 9) == 2 and max([1, 5]) == 5",
            true,
        ),
        (
            "'a,b,c'.split(',')[1:] == ['b', 'c'] and 'abc'[::-1] == 'cba'",
            true,
        ),
        (
            "' x '.strip() == 'x' and 'Hello'.upper().startswith('HE')",
            true,
        ),
        (
            "'a-b-a'.count('a') == 2 and 'abc'.find('c') == 2 and 'aXa'.replace('X', 'b') == 'aba'",
            true,
        ),
        (
            "str(12) + '3' == '123' and int('42') == 42 and float('1.5') == 1.5",
            true,
        ),
        (
            "isinstance(data, dict) and isinstance(data['n'], (int, float))",
            true,
        ),
        (
            "sorted(data.keys()) == ['checks', 'n'] and ('n', 7) in data.items()",
            true,
        ),
        (
            "[1, 2].index(2) == 1 and [1, 1].count(1) == 2 and abs(-3) == 3",
            true,
        ),
        (
            "data.get('missing', 'd') == 'd' and 'n' in data and 'x' not in data",
            true,
        ),
        ("bool('') or bool([])", false),
        ("output.endswith(('}', ']'))", true),
    ] {
        let c = Condition::compile(condition).unwrap_or_else(|e| panic!("{condition}: {e}"));
        assert_eq!(c.holds(&p), Ok(expected), "{condition}");
    }
}

#[test]
fn escape_attempts_are_refused_when_the_watch_is_created() {
    for (attempt, reason) in [
        ("__import__('os').system('id')", "is not allowed"),
        ("__import__('os')", "`__import__()` is not allowed"),
        ("import os", "not a Python expression"),
        (
            "open('/etc/passwd').read()",
            "method `.read()` is not allowed",
        ),
        ("len(open('/etc/passwd'))", "`open()` is not allowed"),
        ("eval('1')", "`eval()` is not allowed"),
        ("exec('x = 1')", "`exec()` is not allowed"),
        ("output.__class__", "attribute `.__class__` is not allowed"),
        (
            "output.__class__.__mro__[1].__subclasses__()",
            "is not allowed",
        ),
        (
            "().__class__.__bases__[0]",
            "attribute `.__bases__` is not allowed",
        ),
        (
            "data.__getitem__('x')",
            "method `.__getitem__()` is not allowed",
        ),
        ("output.format(1)", "method `.format()` is not allowed"),
        (
            "(lambda: 1)()",
            "only the listed builtins and methods may be called",
        ),
        ("lambda x: x", "lambda is not allowed"),
        ("[x for x in output]", "comprehensions are not supported"),
        ("getattr(output, 'lower')", "`getattr()` is not allowed"),
        ("globals()", "`globals()` is not allowed"),
        ("__builtins__", "unknown name `__builtins__`"),
        ("os", "unknown name `os`"),
        ("(x := 1)", "`:=` is not allowed"),
        ("f'{output}'", "f-strings are not supported"),
        ("len(*output)", "`*` unpacking is not supported"),
        (
            "sorted(output, key=len)",
            "keyword arguments are not supported",
        ),
        ("isinstance(output, object)", "isinstance takes str, int"),
        ("type(output)", "`type()` is not allowed"),
        ("1 if output else 2", "not supported"),
        ("~exit_code", "`~` is not supported"),
        ("exit_code << 2", "operator `<<` is not supported"),
        ("{1, 2}", "sets are not supported"),
        ("b'x'", "bytes literals are not supported"),
        ("", "the condition is empty"),
    ] {
        let err = Condition::compile(attempt).expect_err(attempt);
        assert!(err.reason.contains(reason), "{attempt}: {err}");
    }
    let long = "1 + ".repeat(600) + "1";
    assert!(
        Condition::compile(&long)
            .unwrap_err()
            .reason
            .contains("bytes")
    );
    let deep = "(".repeat(40) + "1" + &")".repeat(40);
    assert!(
        Condition::compile(&deep).is_ok(),
        "parentheses are not nesting"
    );
    let nested = "not ".repeat(80) + "changed";
    assert!(
        Condition::compile(&nested)
            .unwrap_err()
            .reason
            .contains("nested deeper")
    );
}

#[test]
fn a_refusal_says_where() {
    let err = Condition::compile("(exit_code == 0 and\n  output.__len__())").unwrap_err();
    assert_eq!((err.line, err.column), (2, 10));
    assert_eq!(
        err.to_string(),
        "stop_on, line 2 column 10: method `.__len__()` is not allowed; the methods are lower, \
         upper, strip, startswith, endswith, split, count, find, replace, get, keys, values, \
         items and index"
    );
}

#[test]
fn evaluation_is_bounded_and_errors_are_values_not_panics() {
    let big = "x".repeat(64 * 1024);
    let p = poll(&big);
    for (condition, expected) in [
        ("output * 100000", "string longer than"),
        ("'ab' * 9999999999", "string longer than"),
        ("[output] * 3", "unsupported operand"),
        ("2 ** 64", "integer overflow"),
        ("9223372036854775807 + 1", "integer overflow"),
        ("1 // 0", "division by zero"),
        ("data['x']", "'NoneType' object is not subscriptable"),
        ("{'a': 1}['b']", "KeyError"),
        ("[1][5]", "list index out of range"),
        ("'a' < 1", "not supported"),
        ("int('x')", "invalid literal"),
        ("len(output.split('x')) > 0", "collection of more than"),
        ("sorted(output) == 1", "collection of more than"),
        ("output.replace('x', output)", "string longer than"),
    ] {
        let c = Condition::compile(condition).unwrap_or_else(|e| panic!("{condition}: {e}"));
        let err = c.holds(&p).expect_err(condition).to_string();
        assert!(err.contains(expected), "{condition}: {err}");
    }
    // A condition that would run long hits the step budget, not the clock.
    let many = format!("[{}1]", "1,".repeat(15_000));
    let err = Condition::compile("sorted(data) == []")
        .unwrap()
        .holds(&poll(&many))
        .unwrap_err();
    assert!(matches!(err, EvalError::Budget(_)), "{err}");
}

fn fragments() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "output",
        "data",
        "exit_code",
        "prev_output",
        "changed",
        "None",
        "True",
        "1",
        "-2",
        "0.5",
        "'a'",
        "\"x\"",
        "[1, 'a']",
        "{'k': [1]}",
        "()",
        "data['k']",
        "output[1:3]",
        "output.lower()",
        "data.get('k')",
        "len(output)",
        "str(data)",
        "sorted(output)",
        "int('7')",
        "max(1, 2)",
        "output.split()",
        "__import__",
        "lambda: 0",
        "x for x in y",
    ]);
    let ops = prop::sample::select(vec![
        " and ", " or ", " == ", " != ", " < ", " in ", " not in ", " is ", " + ", " * ", " // ",
        " % ", " ** ", "[", "]", "(", ")", ".", ",", " not ", ":", "\n",
    ]);
    prop::collection::vec((atoms, ops), 0..12).prop_map(|parts| {
        parts
            .into_iter()
            .map(|(a, o)| format!("{a}{o}"))
            .collect::<String>()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Any text at all: compiling never panics, and what compiles evaluates to a value or
    /// an error without panicking, whatever the poll.
    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,80}", output in "\\PC{0,40}", code in any::<i64>()) {
        if let Ok(c) = Condition::compile(&src) {
            let _ = c.holds(&Poll { output: &output, exit_code: code, prev_output: Some("p") });
        }
    }

    /// Python-shaped text built from the language's pieces (and some that are not):
    /// compiling and evaluating never panic and always end within the step budget.
    #[test]
    fn python_shaped_text_never_panics(src in fragments(), json in prop::sample::select(vec![
        "{\"k\": [1, 2, \"x\"]}", "[1, 2]", "not json", "{\"k\": null}", "\"s\"",
    ])) {
        if let Ok(c) = Condition::compile(&src) {
            let _ = c.holds(&Poll { output: json, exit_code: 1, prev_output: None });
        }
    }
}

/// A JSON object of `n` keys, as a poll's output.
fn big_object(n: usize) -> String {
    let fields: Vec<String> = (0..n).map(|i| format!("\"key{i}\": {i}")).collect();
    format!("{{{}}}", fields.join(", "))
}

#[test]
fn heavy_work_over_large_data_is_charged_and_stops_at_the_budget() {
    let object = big_object(6_000);
    let p = poll(&object);
    let list = format!(
        "[{}]",
        (0..6_000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let lp = poll(&list);
    for (condition, p) in [
        // Comparing a 6,000-key dict to itself is 18 million key comparisons.
        ("data == data", &p),
        ("data != data", &p),
        ("[data, data] == [data, data]", &p),
        ("(data, 1) < (data, 2)", &p),
        ("data in [data]", &p),
        ("[data].count(data) == 1", &p),
        ("{data['key1']: 1} == {1: 1} and data == data", &p),
        (
            "sorted(data) == sorted(data) and sorted(data) == sorted(data) and sorted(data) == sorted(data) and sorted(data) == sorted(data)",
            &lp,
        ),
    ] {
        let c = Condition::compile(condition).unwrap_or_else(|e| panic!("{condition}: {e}"));
        let err = c.holds(p).expect_err(condition);
        assert!(matches!(err, EvalError::Budget(_)), "{condition}: {err}");
    }
    // A small dict compares fine, and cheap work on the big one is allowed.
    assert!(holds("{'a': 1, 'b': [2]} == {'b': [2], 'a': 1}", &p));
    assert!(holds("len(data) == 6000 and data['key5999'] == 5999", &p));
}

#[test]
fn str_of_a_large_value_is_refused_before_it_is_built() {
    // Three copies of 100 KiB, with its newlines escaped, are more than the cap: refused,
    // not rendered and then measured.
    let chunk = "y\n".repeat(50 * 1024);
    let p = poll(&chunk);
    let c = Condition::compile("len(str([output, output, output])) > 0").unwrap();
    let err = c.holds(&p).unwrap_err();
    assert!(matches!(err, EvalError::Budget(_)), "{err}");
    assert!(err.to_string().contains("string longer than"), "{err}");
    // A KeyError quotes a short repr of the key, not the whole value.
    let object = big_object(2_000);
    let err = Condition::compile("{1: 2}[str(data)]")
        .unwrap()
        .holds(&poll(&object))
        .unwrap_err();
    assert!(err.to_string().len() < 400, "{err}");
}

#[test]
fn sorting_nan_and_mixed_types_raises_or_sorts_but_never_panics() {
    for (condition, expected) in [
        (
            "sorted([3, float('nan'), 1, float('nan'), 2]) != []",
            Ok(true),
        ),
        (
            "len(sorted([float('nan'), 1.5, -2, float('nan'), 7])) == 5",
            Ok(true),
        ),
        ("float('nan') < 1 or float('nan') >= 1", Ok(false)),
        ("max([float('nan'), 1]) != 5", Ok(true)),
        (
            "sorted([[1, 'a'], [1, 2]])",
            Err("'<' not supported between instances of"),
        ),
        ("sorted([1, 'a', None, 2.5])", Err("not supported")),
        ("sorted([(1,), [1]])", Err("not supported")),
        (
            "sorted(['b', 'a']) == ['a', 'b'] and sorted([2, 1.5, True]) == [True, 1.5, 2]",
            Ok(true),
        ),
        (
            "sorted([(2, 'b'), (1, 'z'), (2, 'a')]) == [(1, 'z'), (2, 'a'), (2, 'b')]",
            Ok(true),
        ),
    ] {
        let c = Condition::compile(condition).unwrap_or_else(|e| panic!("{condition}: {e}"));
        match (c.holds(&poll("")), expected) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{condition}"),
            (Err(e), Err(want)) => assert!(e.to_string().contains(want), "{condition}: {e}"),
            (got, want) => panic!("{condition}: got {got:?}, expected {want:?}"),
        }
    }
}

#[test]
fn a_deadline_in_the_past_stops_a_long_evaluation() {
    let list = format!(
        "[{}]",
        (0..15_000)
            .map(|i| (i % 7).to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let c = Condition::compile("sorted(data) == sorted(data)").unwrap();
    let err = c
        .holds_until(&poll(&list), std::time::Instant::now())
        .unwrap_err();
    assert_eq!(err, EvalError::Budget("it ran out of time".into()));
}

fn json_values() -> impl Strategy<Value = String> {
    let atom = prop::sample::select(vec![
        "1",
        "-3",
        "2.5",
        "1e308",
        "-0.0",
        "\"a\"",
        "\"\"",
        "null",
        "true",
        "false",
        "[]",
        "[1, \"x\"]",
        "[[1], [\"a\"]]",
        "{}",
        "{\"k\": 1}",
    ]);
    prop::collection::vec(atom, 0..40).prop_map(|items| format!("[{}]", items.join(", ")))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Sorting, ordering and comparing any mix of values (with NaN added) ends in a value or
    /// an error, never a panic.
    #[test]
    fn ordering_any_mix_of_values_never_panics(json in json_values()) {
        for condition in [
            "sorted(data)",
            "sorted(data + [float('nan')])",
            "sorted([float('nan')] + data + [float('nan')])",
            "min(data + [float('nan')])",
            "max(data)",
            "data < sorted(data)",
            "data == sorted(data)",
            "str(data)",
        ] {
            let c = Condition::compile(condition).unwrap();
            let _ = c.holds(&Poll { output: &json, exit_code: 0, prev_output: None });
        }
    }
}
