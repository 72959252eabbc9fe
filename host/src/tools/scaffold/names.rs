//! The names a scaffold derives from `NAME` and `--kind`: the plugin's
//! name in each language's package system, and the custom kind with its
//! plural.

use super::ScaffoldError;

/// Names no project may take: they would shadow the SDK, a standard
/// library crate, or a directory the scaffold writes.
const RESERVED: &[&str] = &[
    "wasmctrl-sdk",
    "wasmctrl-apimachinery",
    "std",
    "core",
    "alloc",
    "test",
    "tests",
    "src",
    "vendor",
    "target",
];

/// The plugin's name as each package system spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PluginName {
    /// `NAME` as given: the crate, project and npm package name, and the
    /// plugin's name in the host config.
    pub(super) name: String,
    /// `NAME` with `-` as `_`: the Python module, and the file stem of a
    /// built component (cargo and `wasmctrl build` both spell it so).
    pub(super) snake: String,
}

impl PluginName {
    /// `name` if it is lowercase letters, digits and single dashes,
    /// starting with a letter, at most 40 characters: a valid crate, npm
    /// and Kubernetes name at once.
    pub(super) fn parse(name: &str) -> Result<PluginName, ScaffoldError> {
        let invalid = |why: &str| ScaffoldError::Name {
            name: name.to_string(),
            why: why.to_string(),
        };
        if name.is_empty() || name.len() > 40 {
            return Err(invalid("it must be 1 to 40 characters"));
        }
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(invalid("it must start with a lowercase letter"));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(invalid(
                "it may hold only lowercase letters, digits and dashes",
            ));
        }
        if name.ends_with('-') || name.contains("--") {
            return Err(invalid("dashes must separate words"));
        }
        if RESERVED.contains(&name) || PYTHON_KEYWORDS.contains(&name) {
            return Err(invalid("it is reserved"));
        }
        Ok(PluginName {
            name: name.to_string(),
            snake: name.replace('-', "_"),
        })
    }

    /// Refuses a name whose Python module would shadow a module the
    /// plugin needs (a Python plugin's module is its snake name).
    pub(super) fn check_python(&self) -> Result<(), ScaffoldError> {
        if PYTHON_MODULES.contains(&self.snake.as_str()) {
            return Err(ScaffoldError::Name {
                name: self.name.clone(),
                why: format!(
                    "a Python plugin's module would be {:?}, which shadows the module of that name in Python's standard library or its toolchain; choose another name (say {:?})",
                    self.snake,
                    format!("{}-operator", self.name)
                ),
            });
        }
        Ok(())
    }

    /// `NAME` in PascalCase: `my-app` → `MyApp`, the default kind.
    pub(super) fn pascal(&self) -> String {
        self.name
            .split('-')
            .map(|word| {
                let mut chars = word.chars();
                chars.next().map_or_else(String::new, |first| {
                    first.to_ascii_uppercase().to_string() + chars.as_str()
                })
            })
            .collect()
    }
}

/// Python module names that are keywords would not import.
const PYTHON_KEYWORDS: &[&str] = &[
    "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif",
    "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda",
    "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// Modules a Python plugin's own module would shadow, or be shadowed by:
/// the standard library's (`sys.stdlib_module_names` of CPython 3.11, whose
/// names a plugin name can spell), and the modules componentize-py and the
/// SDK bring. A plugin named `json` would import itself as `json`.
const PYTHON_MODULES: &[&str] = &[
    "abc",
    "aifc",
    "antigravity",
    "argparse",
    "array",
    "ast",
    "asynchat",
    "asyncio",
    "asyncore",
    "atexit",
    "audioop",
    "base64",
    "bdb",
    "binascii",
    "bisect",
    "builtins",
    "bz2",
    "calendar",
    "cgi",
    "cgitb",
    "chunk",
    "cmath",
    "cmd",
    "code",
    "codecs",
    "codeop",
    "collections",
    "colorsys",
    "compileall",
    "componentize_py_async_support",
    "componentize_py_runtime",
    "componentize_py_types",
    "concurrent",
    "configparser",
    "contextlib",
    "contextvars",
    "copy",
    "copyreg",
    "crypt",
    "csv",
    "ctypes",
    "curses",
    "dataclasses",
    "datetime",
    "dbm",
    "decimal",
    "difflib",
    "dis",
    "distutils",
    "doctest",
    "email",
    "encodings",
    "ensurepip",
    "enum",
    "errno",
    "faulthandler",
    "fcntl",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "gc",
    "genericpath",
    "getopt",
    "getpass",
    "gettext",
    "glob",
    "graphlib",
    "grp",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "idlelib",
    "imaplib",
    "imghdr",
    "imp",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "lib2to3",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "mailcap",
    "marshal",
    "math",
    "mimetypes",
    "mmap",
    "modulefinder",
    "msilib",
    "msvcrt",
    "multiprocessing",
    "netrc",
    "nis",
    "nntplib",
    "nt",
    "ntpath",
    "nturl2path",
    "numbers",
    "opcode",
    "operator",
    "optparse",
    "os",
    "ossaudiodev",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "pipes",
    "pkgutil",
    "platform",
    "plistlib",
    "poll_loop",
    "poplib",
    "posix",
    "posixpath",
    "pprint",
    "profile",
    "pstats",
    "pty",
    "pwd",
    "py_compile",
    "pyclbr",
    "pydoc",
    "pydoc_data",
    "pyexpat",
    "queue",
    "quopri",
    "random",
    "re",
    "readline",
    "reprlib",
    "resource",
    "rlcompleter",
    "runpy",
    "sched",
    "secrets",
    "select",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "site",
    "smtpd",
    "smtplib",
    "sndhdr",
    "socket",
    "socketserver",
    "spwd",
    "sqlite3",
    "sre_compile",
    "sre_constants",
    "sre_parse",
    "ssl",
    "stat",
    "statistics",
    "string",
    "stringprep",
    "struct",
    "subprocess",
    "sunau",
    "symtable",
    "sys",
    "sysconfig",
    "syslog",
    "tabnanny",
    "tarfile",
    "telnetlib",
    "tempfile",
    "termios",
    "textwrap",
    "this",
    "threading",
    "time",
    "timeit",
    "tkinter",
    "token",
    "tokenize",
    "tomllib",
    "trace",
    "traceback",
    "tracemalloc",
    "tty",
    "turtle",
    "turtledemo",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "urllib",
    "uu",
    "uuid",
    "venv",
    "warnings",
    "wasmctrl_sdk",
    "wave",
    "weakref",
    "webbrowser",
    "winreg",
    "winsound",
    "wit_world",
    "wsgiref",
    "xdrlib",
    "xml",
    "xmlrpc",
    "zipapp",
    "zipfile",
    "zipimport",
    "zlib",
    "zoneinfo",
];

/// The custom kind a scaffold reconciles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CustomKind {
    pub(super) group: String,
    pub(super) version: String,
    pub(super) kind: String,
    /// Kubernetes' default plural of the kind, lowercase.
    pub(super) plural: String,
    pub(super) singular: String,
}

impl CustomKind {
    /// `GROUP/VERSION/KIND`, or for `None` `NAME.example.com/v1alpha1/Name`.
    pub(super) fn parse(
        spec: Option<&str>,
        name: &PluginName,
    ) -> Result<CustomKind, ScaffoldError> {
        let (group, version, kind) = match spec {
            None => (
                format!("{}.example.com", name.name),
                "v1alpha1".to_string(),
                name.pascal(),
            ),
            Some(spec) => {
                let parts: Vec<&str> = spec.split('/').collect();
                let [group, version, kind] = parts.as_slice() else {
                    return Err(kind_error(
                        spec,
                        "it must be GROUP/VERSION/KIND, like demo.example.com/v1alpha1/Greeting",
                    ));
                };
                (
                    (*group).to_string(),
                    (*version).to_string(),
                    (*kind).to_string(),
                )
            }
        };
        let spec = spec.map_or_else(|| format!("{group}/{version}/{kind}"), str::to_string);
        if !group.contains('.') || !is_dns_subdomain(&group) {
            return Err(kind_error(
                &spec,
                "the group must be a DNS subdomain with a dot, like demo.example.com (a CRD's group cannot be a built-in one)",
            ));
        }
        if group.ends_with(".k8s.io") || group.ends_with(".kubernetes.io") || group == "k8s.io" {
            return Err(kind_error(
                &spec,
                "groups under k8s.io and kubernetes.io are Kubernetes' own",
            ));
        }
        if !is_version(&version) {
            return Err(kind_error(
                &spec,
                "the version must be like v1, v1beta2 or v1alpha1",
            ));
        }
        let mut chars = kind.chars();
        let kind_ok = chars.next().is_some_and(|c| c.is_ascii_uppercase())
            && chars.all(|c| c.is_ascii_alphanumeric())
            && kind.len() <= 63;
        if !kind_ok {
            return Err(kind_error(
                &spec,
                "the kind must be PascalCase letters and digits, like Greeting",
            ));
        }
        let singular = kind.to_ascii_lowercase();
        Ok(CustomKind {
            plural: plural_of(&singular),
            singular,
            group,
            version,
            kind,
        })
    }

    /// The CRD's name: `<plural>.<group>`.
    pub(super) fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

fn kind_error(spec: &str, why: &str) -> ScaffoldError {
    ScaffoldError::Kind {
        kind: spec.to_string(),
        why: why.to_string(),
    }
}

/// Kubernetes' default plural of a lowercase kind (what kubectl and the
/// SDKs' fakes assume): `-s`, `-x`, `-z`, `-ch`, `-sh` take `es`; a
/// consonant and `y` become `ies`.
pub(super) fn plural_of(singular: &str) -> String {
    let consonant_y = singular.ends_with('y')
        && !singular[..singular.len() - 1].ends_with(['a', 'e', 'i', 'o', 'u']);
    if consonant_y {
        format!("{}ies", &singular[..singular.len() - 1])
    } else if singular.ends_with(['s', 'x', 'z'])
        || singular.ends_with("ch")
        || singular.ends_with("sh")
    {
        format!("{singular}es")
    } else {
        format!("{singular}s")
    }
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return false;
    }
    let rest = &rest[digits..];
    if rest.is_empty() {
        return true;
    }
    let Some(n) = rest
        .strip_prefix("alpha")
        .or_else(|| rest.strip_prefix("beta"))
    else {
        return false;
    };
    !n.is_empty() && !n.starts_with('0') && n.chars().all(|c| c.is_ascii_digit())
}
