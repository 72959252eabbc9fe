//! `meta.k8s.io/v1` Table responses, which kubectl asks for when it prints
//! for humans: `Name` and `Age` for every kind, the columns kubectl users
//! know for a few common built-ins, and a CRD's `additionalPrinterColumns`.

use std::time::SystemTime;

use serde_json::{Value, json};
use wasmctrl_apimachinery::time;

use crate::http::media::MediaType;
use crate::registry::resources::ResourceInfo;
use crate::values::get_path;

/// Whether `accept` prefers a Table (kubectl's human-readable `get`), and in
/// which meta.k8s.io version.
pub(crate) fn wants_table(accept: &str) -> Option<&'static str> {
    let first = MediaType::offers(accept).next()?;
    if !first.has("as", "Table") || !first.has("g", "meta.k8s.io") {
        return None;
    }
    if first.has("v", "v1") {
        Some("v1")
    } else if first.has("v", "v1beta1") {
        Some("v1beta1")
    } else {
        None
    }
}

/// What a Table row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub(crate) fn parse(v: Option<&str>) -> Include {
        match v {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

/// One column: its definition and how to compute a cell.
struct Column {
    name: String,
    ty: String,
    format: String,
    description: String,
    priority: i64,
    cell: Cell,
}

/// How a table column's cell is computed from an object.
enum Cell {
    Name,
    Age,
    /// A simple JSONPath (`.spec.size`, `.status.conditions[0].type`).
    Path(String),
    Fixed(fn(&Value) -> Value),
}

fn col(name: &str, ty: &str, cell: Cell) -> Column {
    Column {
        name: name.into(),
        ty: ty.into(),
        format: if name == "Name" {
            "name".into()
        } else {
            String::new()
        },
        description: String::new(),
        priority: 0,
        cell,
    }
}

fn count(v: Option<&Value>) -> usize {
    v.and_then(Value::as_object).map_or(0, |m| m.len())
}

fn columns(info: &ResourceInfo) -> Vec<Column> {
    let mut cols = vec![col("Name", "string", Cell::Name)];
    if let Some(custom) = info.printer_columns.as_ref().filter(|c| !c.is_empty()) {
        for c in custom.iter().take(MAX_PRINTER_COLUMNS) {
            let ty = c["type"].as_str().unwrap_or("string").to_string();
            let mut column = col(
                c["name"].as_str().unwrap_or(""),
                &ty,
                Cell::Path(c["jsonPath"].as_str().unwrap_or("").to_string()),
            );
            column.description = c["description"].as_str().unwrap_or("").to_string();
            column.priority = c["priority"].as_i64().unwrap_or(0);
            column.format = c["format"].as_str().unwrap_or("").to_string();
            cols.push(column);
        }
        return cols;
    }
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "ConfigMap") => cols.push(col(
            "Data",
            "integer",
            Cell::Fixed(|o| json!(count(o.get("data")) + count(o.get("binaryData")))),
        )),
        ("", "Secret") => {
            cols.push(col("Type", "string", Cell::Path(".type".into())));
            cols.push(col(
                "Data",
                "integer",
                Cell::Fixed(|o| json!(count(o.get("data")))),
            ));
        }
        ("", "Namespace") => cols.push(col("Status", "string", Cell::Path(".status.phase".into()))),
        ("", "Pod") => cols.push(col("Status", "string", Cell::Path(".status.phase".into()))),
        ("", "Service") => {
            cols.push(col("Type", "string", Cell::Path(".spec.type".into())));
            cols.push(col(
                "Cluster-IP",
                "string",
                Cell::Path(".spec.clusterIP".into()),
            ));
        }
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        ) => cols.push(col(
            "Webhooks",
            "integer",
            Cell::Fixed(|o| json!(o["webhooks"].as_array().map_or(0, Vec::len))),
        )),
        ("apps", "Deployment" | "StatefulSet" | "ReplicaSet") => cols.push(col(
            "Ready",
            "string",
            Cell::Fixed(|o| {
                let ready = o["status"]["readyReplicas"].as_i64().unwrap_or(0);
                let want = o["spec"]["replicas"].as_i64().unwrap_or(0);
                json!(format!("{ready}/{want}"))
            }),
        )),
        _ => {}
    }
    cols.push(col("Age", "date", Cell::Age));
    cols
}

/// `5s`, `3m`, `2h`, `4d` since an RFC 3339 timestamp, as kubectl shows.
fn age(ts: Option<&str>) -> String {
    let Some(then) = ts.and_then(|ts| time::parse(ts).ok()) else {
        return "<unknown>".into();
    };
    let d = SystemTime::now()
        .duration_since(then)
        .map_or(0, |d| d.as_secs());
    match d {
        0..120 => format!("{d}s"),
        120..7200 => format!("{}m", d / 60),
        7200..172_800 => format!("{}h", d / 3600),
        _ => format!("{}d", d / 86_400),
    }
}

/// The most custom printer columns a Table shows (the CRD's first ones).
const MAX_PRINTER_COLUMNS: usize = 64;
/// The most bytes of JSON the cells of one row hold; a cell that would
/// pass it is null. A column whose `jsonPath` is `.` would otherwise copy
/// the whole object into every row, once per such column.
const MAX_ROW_CELL_BYTES: usize = 64 << 10;

/// A JSONPath subset: dotted fields with optional `[n]` indexes.
fn eval_path<'v>(obj: &'v Value, path: &str) -> Option<&'v Value> {
    let mut cur = obj;
    for seg in path.trim_start_matches('.').split('.') {
        if seg.is_empty() {
            continue;
        }
        let (field, idx) = match seg.split_once('[') {
            Some((f, rest)) => (f, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        if !field.is_empty() {
            cur = get_path(cur, field)?;
        }
        if let Some(i) = idx {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

/// The cell of column `c` for `obj`, if it fits the `left` bytes of its
/// row (then taken from them); null otherwise.
fn cell(c: &Column, obj: &Value, left: &mut usize) -> Value {
    let value = match &c.cell {
        Cell::Name => obj["metadata"]["name"].clone(),
        Cell::Age => json!(age(obj["metadata"]["creationTimestamp"].as_str())),
        Cell::Fixed(f) => f(obj),
        Cell::Path(p) => {
            let v = eval_path(obj, p);
            if c.ty == "date" {
                match v.and_then(Value::as_str) {
                    Some(ts) => json!(age(Some(ts))),
                    None => Value::Null,
                }
            } else {
                let Some(v) = v else {
                    return Value::Null;
                };
                // Measured before it is copied.
                let bytes = if v.is_array() || v.is_object() {
                    crate::values::json_len(v)
                } else {
                    0
                };
                if bytes > *left {
                    *left = 0;
                    return Value::Null;
                }
                v.clone()
            }
        }
    };
    *left = left.saturating_sub(crate::values::json_len(&value));
    value
}

fn row(cols: &[Column], obj: &Value, include: Include) -> Value {
    let mut left = MAX_ROW_CELL_BYTES;
    let cells: Vec<Value> = cols.iter().map(|c| cell(c, obj, &mut left)).collect();
    let mut r = json!({"cells": cells});
    match include {
        Include::None => {}
        Include::Metadata => {
            let mut md = obj["metadata"].clone();
            if let Some(m) = md.as_object_mut() {
                m.remove("managedFields");
            }
            r["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md});
        }
        Include::Object => r["object"] = obj.clone(),
    }
    r
}

/// The column definitions of `cols`.
fn definitions(cols: &[Column]) -> Vec<Value> {
    cols.iter()
        .map(|c| {
            json!({"name": c.name, "type": c.ty, "format": c.format,
                "description": c.description, "priority": c.priority})
        })
        .collect()
}

/// A Table of `objects` (each already in the served version), written to
/// `out` one row at a time as `objects` yields them, so that a list holds
/// one object's tree at a time rather than every object's (a tree costs
/// many times its JSON).
pub(crate) fn write_table(
    out: &mut Vec<u8>,
    info: &ResourceInfo,
    version: &str,
    objects: impl IntoIterator<Item = Value>,
    list_metadata: &Value,
    include: Include,
) -> serde_json::Result<()> {
    let cols = columns(info);
    out.extend_from_slice(b"{\"kind\":\"Table\",\"apiVersion\":");
    serde_json::to_writer(&mut *out, &format!("meta.k8s.io/{version}"))?;
    out.extend_from_slice(b",\"metadata\":");
    serde_json::to_writer(&mut *out, list_metadata)?;
    out.extend_from_slice(b",\"columnDefinitions\":");
    serde_json::to_writer(&mut *out, &definitions(&cols))?;
    out.extend_from_slice(b",\"rows\":[");
    for (i, object) in objects.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, &row(&cols, &object, include))?;
    }
    out.extend_from_slice(b"]}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        let tbl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(wants_table(tbl), Some("v1"));
        assert_eq!(wants_table("application/json"), None);
        assert_eq!(wants_table(""), None);
    }

    #[test]
    fn ages_and_paths() {
        let ago = |secs: u64| {
            time::format_seconds(SystemTime::now() - std::time::Duration::from_secs(secs))
        };
        assert_eq!(age(Some(&ago(5))), "5s");
        assert_eq!(age(Some(&ago(300))), "5m");
        assert_eq!(age(Some(&ago(3 * 86_400 + 60))), "3d");
        assert_eq!(age(Some("yesterday")), "<unknown>");
        assert_eq!(age(None), "<unknown>");
        let o = json!({"status": {"conditions": [{"type": "Ready"}]}});
        assert_eq!(
            eval_path(&o, ".status.conditions[0].type"),
            Some(&json!("Ready"))
        );
        assert_eq!(eval_path(&o, ".spec.x"), None);
    }

    #[test]
    fn a_row_holds_at_most_its_bytes_of_cells_and_a_table_its_columns() {
        let mut info = crate::registry::resources::builtins()
            .into_iter()
            .find(|i| i.kind == "ConfigMap")
            .unwrap();
        let whole: Vec<Value> = (0..100)
            .map(|i| json!({"name": format!("c{i}"), "type": "string", "jsonPath": "."}))
            .collect();
        info.printer_columns = Some(whole);
        let big = json!({"metadata": {"name": "big"}, "data": {"x": "y".repeat(40 << 10)}});
        let mut written = Vec::new();
        write_table(&mut written, &info, "v1", [big], &json!({}), Include::None).unwrap();
        let t: Value = serde_json::from_slice(&written).unwrap();
        assert_eq!(
            t["columnDefinitions"].as_array().unwrap().len(),
            1 + MAX_PRINTER_COLUMNS
        );
        let cells = t["rows"][0]["cells"].as_array().unwrap();
        assert!(cells[1].is_object(), "the first copy fits");
        assert!(cells[2..].iter().all(Value::is_null), "the rest would not");
        assert!(t.to_string().len() < 2 * MAX_ROW_CELL_BYTES);
    }
}
