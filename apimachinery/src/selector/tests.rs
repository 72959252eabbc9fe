use serde_json::json;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse(s: &str) -> LabelSelector {
    LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

#[test]
fn equality_set_and_existence() {
    let l = labels(&[("app", "web"), ("tier", "front")]);
    let t = |s: &str| parse(s).matches(&l);
    assert!(t("app=web"));
    assert!(t("app==web,tier!=db"));
    assert!(!t("app=db"));
    assert!(t("tier in (front, back)"));
    assert!(!t("tier notin (front)"));
    assert!(t("app,!legacy"));
    assert!(!t("legacy"));
    assert!(t(""));
    assert!(LabelSelector::parse("app in front").is_err());
}

#[test]
fn operators_on_a_json_object_s_labels() {
    let o = json!({"metadata": {"labels": {"app": "x", "tier": "web", "n": 1}}});
    let labels = &o["metadata"]["labels"];
    for (sel, want) in [
        ("", true),
        ("app=x", true),
        ("app==x", true),
        ("app!=x", false),
        ("app in (x,y)", true),
        ("app notin (x,y)", false),
        ("tier", true),
        ("!tier", false),
        ("app=x,tier=db", false),
        ("missing notin (a)", true),
        ("missing!=a", true),
        ("missing in (a)", false),
        ("app in (x, y),!gone", true),
        // A label that is not a string is absent.
        ("n", false),
        ("!n", true),
    ] {
        assert_eq!(parse(sel).matches_json(labels), want, "{sel}");
    }
    assert!(parse("!app").matches_json(&Value::Null));
    assert!(!parse("app").matches_json(&Value::Null));
    assert!(LabelSelector::parse("a b").is_err());
}

#[test]
fn only_label_syntax_is_accepted_and_printed_back() {
    for bad in [
        "app=web&x=1",
        "app=we b",
        "a/b/c=d",
        "app in ()",
        "app=web?watch=1",
        "=web",
        "app in (a b)",
        "app in (a",
        "app in a)",
        "!app=b",
        "!",
        "app=(",
        "app>1",
        "app<1",
        "app notin",
        "app inx (a)",
        "app = = b",
    ] {
        assert!(LabelSelector::parse(bad).is_err(), "{bad:?} accepted");
    }
    // `app==` is `app` equal to the empty value.
    assert_eq!(parse("app=="), parse("app="));
    assert!(parse("app==").matches(&labels(&[("app", "")])));
    let s = parse(" app = web , tier in (a, b),!legacy,x.io/y");
    assert_eq!(s.to_string(), "app=web,tier in (a,b),!legacy,x.io/y");
    assert!(LabelSelector::parse(&"a=b,".repeat(100)).is_err());
}

#[test]
fn empty_terms_are_skipped_and_empty_values_kept() {
    assert_eq!(parse(",a=b,,c,"), parse("a=b,c"));
    assert_eq!(parse(",a=b,,c,").to_string(), "a=b,c");
    let s = parse("k in (a,),j notin (,b)");
    assert_eq!(s.to_string(), "k in (a,),j notin (,b)");
    assert!(s.matches(&labels(&[("k", "")])));
    assert!(!s.matches(&labels(&[("k", ""), ("j", "")])));
}

#[test]
fn in_and_notin_are_keywords_only_as_operators() {
    let s = parse("in=notin,notin in (in, notin)");
    assert!(s.matches(&labels(&[("in", "notin"), ("notin", "in")])));
    assert_eq!(s.to_string(), "in=notin,notin in (in,notin)");
    assert_eq!(parse(&s.to_string()), s);
}

#[test]
fn messages_say_what_was_wrong() {
    let e = |s: &str| LabelSelector::parse(s).unwrap_err().to_string();
    assert_eq!(
        e("a b"),
        "unable to parse requirement: found 'b', expected: in, notin, =, == or !="
    );
    assert_eq!(
        e("app in (a"),
        "unable to parse requirement: found end of string, expected: ',' or ')'"
    );
    assert_eq!(
        e("app=we b"),
        "unable to parse requirement: found 'b', expected: ',' or end of string"
    );
    assert_eq!(
        e("app in ()"),
        "unable to parse requirement: values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
    );
    assert!(
        e("Bad/Key=x")
            .starts_with("unable to parse requirement: key: Invalid value: \"Bad/Key\": prefix part a lowercase RFC 1123 subdomain"),
        "{}",
        e("Bad/Key=x")
    );
    assert!(
        e("k in (a,-b)").starts_with(
            "unable to parse requirement: values[1]: Invalid value: \"-b\": a valid label must be"
        ),
        "{}",
        e("k in (a,-b)")
    );
    assert_eq!(
        LabelSelector::parse("k=é€").unwrap_err(),
        SelectorError::Value {
            value: "é€".into(),
            index: 0,
            error: NameError::LabelValue
        }
    );
    // A refusal quotes at most 64 characters of what it was given.
    let long = format!("k={}", "x".repeat(1 << 20));
    assert!(e(&long).len() < 400, "{}", e(&long).len());
}

#[test]
fn bounds_are_parameters() {
    let many = |n: usize| vec!["a=b"; n].join(",");
    assert!(LabelSelector::parse(&many(64)).is_ok());
    assert_eq!(
        LabelSelector::parse(&many(65)),
        Err(SelectorError::TooManyRequirements { max: 64 })
    );
    assert!(LabelSelector::parse_with(&many(65), SelectorBounds::UNLIMITED).is_ok());
    let set = |n: usize| format!("k in ({})", vec!["v"; n].join(","));
    assert!(LabelSelector::parse(&set(64)).is_ok());
    assert_eq!(
        LabelSelector::parse(&set(65)),
        Err(SelectorError::TooManyValues { max: 64 })
    );
    let tight = SelectorBounds {
        max_requirements: 2,
        max_values: 1,
    };
    assert!(LabelSelector::parse_with("a,b", tight).is_ok());
    assert!(LabelSelector::parse_with("a,b,c", tight).is_err());
    assert!(LabelSelector::parse_with("a in (x,y)", tight).is_err());
}

#[test]
fn from_object_reads_match_labels_and_expressions() {
    let s = LabelSelector::from_object(
        &json!({
            "matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["web", "db"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "team", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []}
            ]
        }),
        SelectorBounds::DEFAULT,
    )
    .unwrap();
    assert_eq!(
        s.to_string(),
        "a=1,b=2,tier in (web,db),env notin (prod),team,!legacy"
    );
    assert_eq!(parse(&s.to_string()), s);
    let everything = LabelSelector::from_object(&json!({}), SelectorBounds::DEFAULT).unwrap();
    assert!(everything.is_empty() && everything.matches(&BTreeMap::new()));

    let err = |v: Value| LabelSelector::from_object(&v, SelectorBounds::DEFAULT).unwrap_err();
    assert_eq!(
        err(json!({"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]})),
        SelectorError::Operator("Gt".into())
    );
    assert_eq!(
        err(json!({"matchExpressions": [{"key": "k", "operator": "In"}]})),
        SelectorError::EmptySet
    );
    assert_eq!(
        err(json!({"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["x"]}]})),
        SelectorError::ValuesForExists { count: 1 }
    );
    assert!(matches!(
        err(json!({"matchLabels": {"a b": "x"}})),
        SelectorError::Key { .. }
    ));
    assert!(matches!(
        err(json!({"matchLabels": {"a": 1}})),
        SelectorError::Object(_)
    ));
    assert!(matches!(err(json!("app=x")), SelectorError::Object(_)));
    let lone = json!({"matchExpressions": [
        {"key": "k", "operator": "In", "values": [""]},
        {"key": "j", "operator": "NotIn", "values": [""]}
    ]});
    let lone = LabelSelector::from_object(&lone, SelectorBounds::DEFAULT).unwrap();
    assert_eq!(lone.to_string(), "k=,j!=");
    assert_eq!(
        err(json!({"matchExpressions": [{"key": "k", "operator": "In", "values": vec!["v"; 65]}]})),
        SelectorError::TooManyValues { max: 64 }
    );
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    fn key() -> impl Strategy<Value = String> {
        "([a-z]{1,3}(\\.[a-z]{1,3})?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,4}[A-Za-z0-9])?"
    }

    fn value() -> impl Strategy<Value = String> {
        "([A-Za-z0-9]([A-Za-z0-9._-]{0,4}[A-Za-z0-9])?)?|in|notin"
    }

    /// One term of the string form, in any of its spellings.
    fn term() -> impl Strategy<Value = String> {
        // A lone "" has no set spelling (`k in ()` is refused).
        let values = prop::collection::vec(value(), 1..4)
            .prop_filter("a lone empty value is k=", |vs| {
                vs.len() > 1 || !vs[0].is_empty()
            });
        prop_oneof![
            (key(), value(), prop_oneof!["=", "==", " = ", "!=", " != "])
                .prop_map(|(k, v, op)| format!("{k}{op}{v}")),
            (key(), values, prop_oneof![" in ", " notin ", "  in\t"])
                .prop_map(|(k, vs, op)| format!("{k}{op}( {} )", vs.join(" , "))),
            key(),
            key().prop_map(|k| format!("! {k}")),
        ]
    }

    // Bounded for CI (256 cases each); PROPTEST_CASES=100000 for a long run.
    proptest! {
        #[test]
        fn any_accepted_text_is_printed_back_as_what_was_parsed(
            s in "[a-z0-9=!,() ./_-]{0,60}|\\PC{0,60}"
        ) {
            if let Ok(sel) = LabelSelector::parse(&s) {
                let printed = sel.to_string();
                prop_assert_eq!(LabelSelector::parse(&printed), Ok(sel));
                prop_assert!(!printed.contains(['&', '?', '#', '%']));
            }
        }

        #[test]
        fn valid_selectors_parse_and_print_canonically(
            terms in prop::collection::vec(term(), 0..6)
        ) {
            let text = terms.join(" , ");
            let sel = LabelSelector::parse(&text);
            prop_assert!(sel.is_ok(), "{:?}: {:?}", text, sel);
            let sel = sel.unwrap_or_default();
            let printed = sel.to_string();
            prop_assert_eq!(LabelSelector::parse(&printed), Ok(sel.clone()));
            prop_assert_eq!(printed.clone(), LabelSelector::parse(&printed).unwrap_or_default().to_string());
            prop_assert!(!printed.contains(' ') || printed.contains(" in (") || printed.contains(" notin ("));
        }

        #[test]
        fn matching_agrees_across_label_forms(
            terms in prop::collection::vec(term(), 0..4),
            pairs in prop::collection::btree_map(key(), value(), 0..4),
        ) {
            let Ok(sel) = LabelSelector::parse(&terms.join(",")) else {
                return Err(TestCaseError::fail("valid terms refused"));
            };
            let json = serde_json::to_value(&pairs).unwrap_or_default();
            prop_assert_eq!(sel.matches(&pairs), sel.matches_json(&json));
        }
    }
}

#[test]
fn the_object_form_reads_back_to_an_equal_selector_matching_the_same_labels() {
    let text = "app=web,tier!=db,zone in (a,b),stage notin (x),canary,!legacy";
    let s = LabelSelector::parse(text).unwrap();
    let object = s.to_object();
    let back = LabelSelector::from_object(&object, SelectorBounds::DEFAULT).unwrap();
    for labels in [
        json!({"app": "web", "zone": "a", "canary": ""}),
        json!({"app": "web", "zone": "a", "canary": "", "tier": "db"}),
        json!({"app": "web", "zone": "c", "canary": ""}),
        json!({"app": "web", "zone": "b", "canary": "", "legacy": "1"}),
        json!({"zone": "a", "canary": ""}),
    ] {
        assert_eq!(
            s.matches_json(&labels),
            back.matches_json(&labels),
            "{labels}"
        );
    }
    assert!(s.matches_json(&json!({"app": "web", "zone": "a", "canary": ""})));
    assert_eq!(object["matchExpressions"][0]["operator"], "In");
    assert_eq!(
        object["matchExpressions"][4],
        json!({"key": "canary", "operator": "Exists"})
    );
}
