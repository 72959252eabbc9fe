use proptest::prelude::*;
use serde_json::json;

use super::*;

fn ok(target: Value, patch: Value) -> Value {
    json_patch(&target, &patch, PatchBounds::KUBERNETES).unwrap_or_else(|e| panic!("{e}"))
}

fn err(target: Value, patch: Value) -> PatchError {
    json_patch(&target, &patch, PatchBounds::KUBERNETES).unwrap_err()
}

// RFC 6902 Appendix A, in order.

#[test]
fn a1_add_object_member() {
    assert_eq!(
        ok(
            json!({"foo":"bar"}),
            json!([{"op":"add","path":"/baz","value":"qux"}])
        ),
        json!({"baz":"qux","foo":"bar"})
    );
}

#[test]
fn a2_add_array_element() {
    assert_eq!(
        ok(
            json!({"foo":["bar","baz"]}),
            json!([{"op":"add","path":"/foo/1","value":"qux"}])
        ),
        json!({"foo":["bar","qux","baz"]})
    );
}

#[test]
fn a3_a4_remove_member_and_element() {
    assert_eq!(
        ok(
            json!({"baz":"qux","foo":"bar"}),
            json!([{"op":"remove","path":"/baz"}])
        ),
        json!({"foo":"bar"})
    );
    assert_eq!(
        ok(
            json!({"foo":["bar","qux","baz"]}),
            json!([{"op":"remove","path":"/foo/1"}])
        ),
        json!({"foo":["bar","baz"]})
    );
}

#[test]
fn a5_replace() {
    assert_eq!(
        ok(
            json!({"baz":"qux","foo":"bar"}),
            json!([{"op":"replace","path":"/baz","value":"boo"}])
        ),
        json!({"baz":"boo","foo":"bar"})
    );
}

#[test]
fn a6_a7_move_value_and_array_element() {
    assert_eq!(
        ok(
            json!({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}),
            json!([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}])
        ),
        json!({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}})
    );
    assert_eq!(
        ok(
            json!({"foo":["all","grass","cows","eat"]}),
            json!([{"op":"move","from":"/foo/1","path":"/foo/3"}])
        ),
        json!({"foo":["all","cows","eat","grass"]})
    );
}

#[test]
fn a8_test_success() {
    let doc = json!({"baz":"qux","foo":["a",2,"c"]});
    assert_eq!(
        ok(
            doc.clone(),
            json!([
                {"op":"test","path":"/baz","value":"qux"},
                {"op":"test","path":"/foo/1","value":2}
            ])
        ),
        doc
    );
}

#[test]
fn a9_test_error_names_index_and_path() {
    let e = err(
        json!({"baz":"qux"}),
        json!([{"op":"test","path":"/baz","value":"bar"}]),
    );
    let PatchError::TestFailed { .. } = &e else {
        panic!("expected TestFailed, got {e:?}")
    };
    let msg = e.to_string();
    assert_eq!(
        msg,
        "json patch operation 0 (test) failed at path \"/baz\": expected \"bar\", found \"qux\""
    );
}

#[test]
fn a10_add_nested_member() {
    assert_eq!(
        ok(
            json!({"foo":"bar"}),
            json!([{"op":"add","path":"/child","value":{"grandchild":{}}}])
        ),
        json!({"foo":"bar","child":{"grandchild":{}}})
    );
}

#[test]
fn a11_unrecognized_members_are_ignored() {
    assert_eq!(
        ok(
            json!({"foo":"bar"}),
            json!([{"op":"add","path":"/baz","value":"qux","xyz":123}])
        ),
        json!({"foo":"bar","baz":"qux"})
    );
}

#[test]
fn a12_add_to_nonexistent_target_fails() {
    let e = err(
        json!({"foo":"bar"}),
        json!([{"op":"add","path":"/baz/bat","value":"qux"}]),
    );
    assert!(
        matches!(&e, PatchError::Failed { path, .. } if path == "/baz/bat"),
        "{e:?}"
    );
}

#[test]
fn a14_escape_ordering() {
    assert_eq!(
        ok(
            json!({"/":9,"~1":10}),
            json!([{"op":"test","path":"/~01","value":10}])
        ),
        json!({"/":9,"~1":10})
    );
}

#[test]
fn a15_comparing_strings_and_numbers() {
    let e = err(
        json!({"/":9,"~1":10}),
        json!([{"op":"test","path":"/~01","value":"10"}]),
    );
    assert!(matches!(e, PatchError::TestFailed { .. }));
}

#[test]
fn a16_add_array_value_appends_with_dash() {
    assert_eq!(
        ok(
            json!({"foo":["bar"]}),
            json!([{"op":"add","path":"/foo/-","value":["abc","def"]}])
        ),
        json!({"foo":["bar",["abc","def"]]})
    );
}

#[test]
fn copy_duplicates_and_missing_from_fails() {
    assert_eq!(
        ok(
            json!({"a":{"b":1}}),
            json!([{"op":"copy","from":"/a","path":"/c"}])
        ),
        json!({"a":{"b":1},"c":{"b":1}})
    );
    let e = err(
        json!({"a":1}),
        json!([{"op":"copy","from":"/x","path":"/c"}]),
    );
    assert!(
        e.to_string()
            .starts_with("json patch operation 0 (copy) failed at path \"/c\""),
        "{e}"
    );
}

#[test]
fn move_into_own_child_fails_and_missing_from_fails() {
    let e = err(
        json!({"a":{"b":1}}),
        json!([{"op":"move","from":"/a","path":"/a/b/c"}]),
    );
    assert!(matches!(e, PatchError::Failed { .. }), "{e:?}");
    let e = err(
        json!({"a":1}),
        json!([{"op":"add","path":"/b","value":2},{"op":"move","from":"/x","path":"/y"}]),
    );
    assert!(
        e.to_string()
            .starts_with("json patch operation 1 (move) failed at path \"/y\""),
        "{e:?}"
    );
}

#[test]
fn failure_leaves_target_untouched_and_errors_on_bad_input() {
    let target = json!({"a":1});
    assert!(json_patch_k(&target, &json!([{"op":"remove","path":"/missing"}])).is_err());
    assert!(
        json_patch_k(
            &target,
            &json!([{"op":"replace","path":"/missing","value":1}])
        )
        .is_err()
    );
    assert!(json_patch_k(&target, &json!({"op":"add"})).is_err());
    assert!(json_patch_k(&target, &json!([{"op":"frobnicate","path":"/a"}])).is_err());
    assert!(json_patch_k(&target, &json!([{"op":"add","path":"a","value":1}])).is_err());
    assert!(
        json_patch_k(
            &json!({"l":[1]}),
            &json!([{"op":"add","path":"/l/01","value":1}])
        )
        .is_err()
    );
    assert!(
        json_patch_k(
            &json!({"l":[1]}),
            &json!([{"op":"add","path":"/l/5","value":1}])
        )
        .is_err()
    );
    assert_eq!(target, json!({"a":1}));
}

/// kube-runtime's `finalizer()` adds the first finalizer with a `test`
/// against null, then removes it with a `test` of the element.
#[test]
fn kube_runtime_finalizer_sequence() {
    let obj = json!({"metadata":{"name":"w"}});
    let added = ok(
        obj,
        json!([
            {"op":"test","path":"/metadata/finalizers","value":null},
            {"op":"add","path":"/metadata/finalizers","value":["example.com/cleanup"]}
        ]),
    );
    assert_eq!(
        added,
        json!({"metadata":{"name":"w","finalizers":["example.com/cleanup"]}})
    );
    let removed = ok(
        added.clone(),
        json!([
            {"op":"test","path":"/metadata/finalizers/0","value":"example.com/cleanup"},
            {"op":"remove","path":"/metadata/finalizers/0"}
        ]),
    );
    assert_eq!(removed, json!({"metadata":{"name":"w","finalizers":[]}}));
    // Once finalizers exist, the null test must fail so the helper
    // does not clobber them.
    let e = err(
        added,
        json!([{"op":"test","path":"/metadata/finalizers","value":null}]),
    );
    assert!(matches!(e, PatchError::TestFailed { .. }));
}

#[test]
fn test_of_absent_path_under_missing_parent_fails() {
    let e = err(
        json!({}),
        json!([{"op":"test","path":"/metadata/finalizers","value":null}]),
    );
    assert!(matches!(e, PatchError::Failed { .. }), "{e:?}");
}

#[test]
fn numbers_compare_by_value() {
    ok(
        json!({"a":1}),
        json!([{"op":"test","path":"/a","value":1.0}]),
    );
}

fn json_patch_k(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    json_patch(target, patch, PatchBounds::KUBERNETES)
}

#[test]
fn root_operations_replace_the_document() {
    assert_eq!(
        ok(
            json!({"a": 1}),
            json!([{"op": "replace", "path": "", "value": [1]}])
        ),
        json!([1])
    );
    assert_eq!(
        ok(
            json!({"a": 1}),
            json!([{"op": "add", "path": "", "value": 2}])
        ),
        json!(2)
    );
    assert!(matches!(
        err(json!({"a": 1}), json!([{"op": "remove", "path": ""}])),
        PatchError::Failed { .. }
    ));
    ok(
        json!({"a": 1}),
        json!([{"op": "test", "path": "", "value": {"a": 1.0}}]),
    );
}

#[test]
fn a_move_onto_itself_does_nothing_even_where_nothing_is() {
    assert_eq!(
        ok(
            json!({"a": 1}),
            json!([{"op": "move", "from": "/x", "path": "/x"}, {"op": "move", "from": "/a", "path": "/a"}])
        ),
        json!({"a": 1})
    );
}

#[test]
fn malformed_operations_say_which_and_why() {
    let e = |ops: Value| err(json!({"a": 1}), ops).to_string();
    assert_eq!(
        e(json!({"op": "add"})),
        "json patch must be a JSON array of operations"
    );
    assert_eq!(
        e(json!([{"op": "add", "path": "/b", "value": 1}, 7])),
        "json patch operation 1: operation must be an object"
    );
    assert_eq!(
        e(json!([{"path": "/a"}])),
        "json patch operation 0: missing string member \"op\""
    );
    assert_eq!(
        e(json!([{"op": "frobnicate", "path": "/a"}])),
        "json patch operation 0: unknown op \"frobnicate\""
    );
    assert_eq!(
        e(json!([{"op": "remove"}])),
        "json patch operation 0: remove: missing string member \"path\""
    );
    assert_eq!(
        e(json!([{"op": "add", "path": "/b"}])),
        "json patch operation 0 (add) failed at path \"/b\": missing member \"value\""
    );
    assert_eq!(
        e(json!([{"op": "copy", "path": "/b", "from": 1}])),
        "json patch operation 0 (copy) failed at path \"/b\": missing string member \"from\""
    );
    assert!(
        e(json!([{"op": "add", "path": "a", "value": 1}])).starts_with(
            "json patch operation 0 (add) failed at path \"a\": invalid JSON pointer \"a\": "
        ),
    );
    assert!(
        e(json!([{"op": "copy", "from": "x~2", "path": "/b"}]))
            .starts_with("json patch operation 0 (copy) failed at path \"/b\": from: invalid JSON pointer \"x~2\": "),
    );
    assert_eq!(
        e(json!([{"op": "remove", "path": "/nope"}])),
        "json patch operation 0 (remove) failed at path \"/nope\": no such location in the document (a missing member or parent, or an array index out of range)"
    );
    assert_eq!(
        e(json!([{"op": "move", "from": "/a", "path": "/a/b"}])),
        "json patch operation 0 (move) failed at path \"/a/b\": cannot move a value into one of its own children"
    );
}

fn bomb(copies: usize) -> Value {
    let mut ops = vec![json!({"op": "add", "path": "/x", "value": [0]})];
    ops.extend((0..copies).map(|_| json!({"op": "copy", "from": "/x", "path": "/x/-"})));
    Value::Array(ops)
}

#[test]
fn copy_amplification_stops_at_the_limit_before_copying() {
    for copies in [23, 30, 1000] {
        let e = err(json!({}), bomb(copies));
        assert!(
            matches!(&e, PatchError::CopyLimit { max: 3_145_728, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("Unable to complete the copy")
                && e.to_string().contains("3145728"),
            "{e}"
        );
    }
    // Below the limit the same shape is fine.
    let ok = ok(json!({}), bomb(10));
    assert!(serde_json::to_vec(&ok).unwrap().len() < 8 * 1024);
    // A smaller budget is a parameter.
    let small = PatchBounds {
        max_copy_bytes: 100,
        ..PatchBounds::KUBERNETES
    };
    assert!(json_patch(&json!({}), &bomb(4), small).is_ok());
    assert!(matches!(
        json_patch(&json!({}), &bomb(6), small),
        Err(PatchError::CopyLimit {
            index: 5,
            copied: 56,
            max: 100,
            ..
        })
    ));
}

#[test]
fn operation_count_is_bounded() {
    let ops: Vec<Value> = (0..=10_000)
        .map(|_| json!({"op": "test", "path": "", "value": {}}))
        .collect();
    let e = err(json!({}), Value::Array(ops));
    assert_eq!(
        e,
        PatchError::TooManyOperations {
            count: 10_001,
            max: 10_000
        }
    );
    assert_eq!(
        e.to_string(),
        "The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
}

#[test]
fn nesting_is_bounded() {
    // Copying a value into its own deepest child doubles its depth. After
    // i copies `/a` is 2^i objects deep; the next copy goes one below its
    // deepest object.
    let mut ops = vec![json!({"op": "add", "path": "/a", "value": {}})];
    for i in 0..12 {
        ops.push(json!({"op": "copy", "from": "/a", "path": "/a".repeat((1 << i) + 1)}));
    }
    let e = err(json!({}), Value::Array(ops));
    assert!(
        matches!(&e, PatchError::TooDeep { max: 100, op, .. } if op == "copy"),
        "{e:?}"
    );
    assert!(e.to_string().contains("exceeding the limit 100"), "{e}");
    // An added value too deep is refused before anything applies.
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let e = err(
        json!({}),
        json!([{"op": "remove", "path": "/nothing"}, {"op": "add", "path": "/x", "value": deep}]),
    );
    assert!(
        matches!(
            e,
            PatchError::TooDeep {
                index: 1,
                depth: 101,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn sizes_match_serde_json() {
    for v in [
        json!({"a": [1, -2.5, "x\"\\\n\u{1}é", null, true, false], "b": {}, "c": []}),
        json!("plain"),
        json!(12345678901234567u64),
    ] {
        let exact = serde_json::to_vec(&v).unwrap().len();
        assert_eq!(json_size(&v, usize::MAX), Some(exact), "{v}");
        assert_eq!(json_size(&v, exact - 1), None);
    }
    assert_eq!(nesting(&json!(1)), 0);
    assert_eq!(nesting(&json!({"a": [[]]})), 3);
}

/// Every example of RFC 7386 Appendix A.
#[test]
fn merge_patch_rfc7386_appendix_a_examples() {
    let cases = [
        (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
        (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
        (json!({"a":"b"}), json!({"a":null}), json!({})),
        (
            json!({"a":"b","b":"c"}),
            json!({"a":null}),
            json!({"b":"c"}),
        ),
        (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
        (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
        (
            json!({"a":{"b":"c"}}),
            json!({"a":{"b":"d","c":null}}),
            json!({"a":{"b":"d"}}),
        ),
        (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
        (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
        (json!({"a":"b"}), json!(["c"]), json!(["c"])),
        (json!({"a":"foo"}), json!(null), json!(null)),
        (json!({"a":"foo"}), json!("bar"), json!("bar")),
        (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
        (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
        (
            json!({}),
            json!({"a":{"bb":{"ccc":null}}}),
            json!({"a":{"bb":{}}}),
        ),
    ];
    for (target, patch, expected) in cases {
        let mut doc = target.clone();
        merge_patch(&mut doc, &patch);
        assert_eq!(doc, expected, "target {target} patch {patch}");
    }
}

/// A JSON value at most `depth` containers deep.
fn json_value(depth: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..3).prop_map(Value::from),
        prop_oneof![Just(1.0f64), Just(0.5)].prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 24, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]{1,2}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A JSON pointer into documents built by [`json_value`].
fn pointer() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof!["[a-c]{1,2}", "[0-2]", Just("-".to_string())],
        0..4,
    )
    .prop_map(|tokens| tokens.iter().map(|t| format!("/{t}")).collect())
}

fn operation() -> impl Strategy<Value = Value> {
    (
        prop_oneof!["add", "remove", "replace", "move", "copy", "test"],
        pointer(),
        pointer(),
        json_value(3),
    )
        .prop_map(
            |(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}),
        )
}

// Bounded for CI (256 cases each); PROPTEST_CASES=100000 for a long run.
proptest! {
    #[test]
    fn json_patch_never_panics_and_keeps_to_its_bounds(
        doc in json_value(4),
        ops in prop::collection::vec(operation(), 0..12),
        max_operations in 0usize..12,
        max_copy_bytes in 0usize..200,
        max_depth in 1usize..8,
    ) {
        let bounds = PatchBounds { max_operations, max_copy_bytes, max_depth, max_move_walk: 1 << 20, max_array_shift: 1 << 24 };
        let before = doc.clone();
        match json_patch(&doc, &Value::Array(ops.clone()), bounds) {
            Ok(out) => {
                prop_assert!(ops.len() <= max_operations);
                // Nothing new is deeper than the bound (the document may
                // have been deeper to begin with).
                prop_assert!(nesting(&out) <= max_depth.max(nesting(&before)));
                let copies = ops.iter().filter(|o| o["op"] == "copy").count();
                if copies == 0 {
                    prop_assert!(json_size(&out, usize::MAX) <= Some(
                        json_size(&before, usize::MAX).unwrap_or(0)
                            + ops.iter().map(|o| json_size(o, usize::MAX).unwrap_or(0)).sum::<usize>()
                    ));
                }
            }
            Err(PatchError::TooManyOperations { count, max }) => {
                prop_assert!(count > max && max == max_operations);
            }
            Err(_) => {}
        }
        prop_assert_eq!(doc, before);
    }

    #[test]
    fn merge_patch_never_panics_and_a_patch_applies_once(
        doc in json_value(4),
        patch in json_value(4),
    ) {
        let mut once = doc.clone();
        merge_patch(&mut once, &patch);
        let mut twice = once.clone();
        merge_patch(&mut twice, &patch);
        prop_assert_eq!(once, twice);
    }
}

#[test]
fn moves_deeper_are_walked_within_a_budget_and_moves_up_are_not_walked() {
    // A 1,000-element array moved down and back up 100 times: the moves up
    // cost no walk, the moves down a walk each, against the budget.
    let doc = json!({"a": vec![0; 1000], "b": {}});
    let mut ops = Vec::new();
    for _ in 0..100 {
        ops.push(json!({"op": "move", "from": "/a", "path": "/b/c"}));
        ops.push(json!({"op": "move", "from": "/b/c", "path": "/a"}));
    }
    let patch = Value::Array(ops);
    let within = PatchBounds {
        max_move_walk: 100 * 1001,
        ..PatchBounds::KUBERNETES
    };
    assert_eq!(json_patch(&doc, &patch, within).unwrap(), doc);
    let past = PatchBounds {
        max_move_walk: 100 * 1001 - 1,
        ..PatchBounds::KUBERNETES
    };
    let e = json_patch(&doc, &patch, past).unwrap_err();
    assert!(matches!(e, PatchError::MoveLimit { index: 198, .. }), "{e}");
    assert!(
        e.to_string().contains("would walk more than 100099 values"),
        "{e}"
    );
}

#[test]
fn insertions_and_removals_in_the_middle_of_arrays_are_budgeted() {
    // Each add at the front shifts the whole array, each remove there
    // shifts the rest back: 10 operations on 1,000 elements shift ~10,000.
    let doc = json!({"a": vec![0; 1000]});
    let mut ops = Vec::new();
    for _ in 0..5 {
        ops.push(json!({"op": "add", "path": "/a/0", "value": 1}));
        ops.push(json!({"op": "remove", "path": "/a/0"}));
    }
    let patch = Value::Array(ops);
    let shifts = 5 * (1000 + 1000);
    let within = PatchBounds {
        max_array_shift: shifts,
        ..PatchBounds::KUBERNETES
    };
    assert_eq!(json_patch(&doc, &patch, within).unwrap(), doc);
    let past = PatchBounds {
        max_array_shift: shifts - 1,
        ..PatchBounds::KUBERNETES
    };
    let e = json_patch(&doc, &patch, past).unwrap_err();
    assert!(matches!(e, PatchError::ShiftLimit { index: 9, .. }), "{e}");
    assert!(
        e.to_string()
            .contains("would shift more than 9999 elements"),
        "{e}"
    );
    // Appending and replacing shift nothing.
    let appends: Vec<Value> = (0..100)
        .map(|_| json!({"op": "add", "path": "/a/-", "value": 1}))
        .collect();
    let tiny = PatchBounds {
        max_array_shift: 0,
        ..PatchBounds::KUBERNETES
    };
    assert!(json_patch(&doc, &Value::Array(appends), tiny).is_ok());
}
