//! The `when` expression language of `conditional-routing` (agentgateway virtual models,
//! "Conditional routing"): each target of a virtual model carries a `when` expression over the
//! request, and the first target whose expression is true wins.
//!
//! It reads a request only through [`Facts`], so it imports nothing else of the crate: the
//! config compiles expressions with it, and the strategy (`routing/conditional.rs`) implements
//! [`Facts`] for a routing request.
//!
//! The language is a small CEL subset: header, path, method, model and metadata values;
//! string, number, `null`, boolean and list literals; `==`, `!=`, `in`, `!`, `&&`, `||` and
//! parentheses. An expression is parsed once, at config load, with errors that point at a
//! column; evaluating it per request never fails: a missing value is `null`, and comparing
//! values of unrelated kinds is simply false.

use std::fmt;

/// Deepest nesting of `(` and `!`; bounds the recursion of both parser and evaluator.
const MAX_DEPTH: usize = 64;

/// The request facts an expression can read.
pub trait Facts {
    /// The value of a request header, looked up by its lower-case name.
    fn header(&self, lower_case_name: &str) -> Option<&str>;
    /// The value of a request metadata key.
    fn metadata(&self, key: &str) -> Option<&str>;
    /// The model name the client asked for.
    fn model(&self) -> &str;
    /// The request path.
    fn path(&self) -> &str;
    /// The request method.
    fn method(&self) -> &str;
}

/// A parsed `when` expression, ready to evaluate against any request.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    root: Expr,
}

/// Why an expression failed to parse, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionError {
    /// 1-based column, counted in characters, where the problem was found.
    pub column: usize,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for ConditionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)
    }
}

impl Condition {
    /// Parses an expression, or says at which column it goes wrong.
    pub fn parse(src: &str) -> Result<Condition, ConditionError> {
        let mut parser = Parser {
            tokens: tokenize(src)?,
            pos: 0,
            depth: 0,
        };
        if let (Tok::End, column) = parser.peek() {
            return Err(error(column, "empty expression"));
        }
        let root = parser.parse_or()?;
        match parser.peek() {
            (Tok::End, _) => Ok(Condition { root }),
            (tok, column) => Err(error(
                column,
                format!("unexpected {} after a complete expression", tok.describe()),
            )),
        }
    }

    /// Evaluates the expression for one request; never fails.
    pub fn eval(&self, facts: &dyn Facts) -> bool {
        self.root.value(facts).truthy()
    }
}

fn error(column: usize, message: impl Into<String>) -> ConditionError {
    ConditionError {
        column,
        message: message.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Tokens

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num(f64),
    /// An operator, a punctuation mark, or the keyword `in`.
    Op(&'static str),
    End,
}

/// Operators and punctuation, two-character ones first so they win.
const OPS: [&str; 11] = ["==", "!=", "&&", "||", "!", "(", ")", "[", "]", ",", "."];

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(text) => format!("`{text}`"),
            Tok::Op(text) => format!("`{text}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Num(_) => "a number".to_string(),
            Tok::End => "end of input".to_string(),
        }
    }
}

/// Splits `src` into tokens, each with its 1-based column; always ends with [`Tok::End`].
fn tokenize(src: &str) -> Result<Vec<(Tok, usize)>, ConditionError> {
    let chars: Vec<char> = src.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(c) = at(i) {
        let column = i + 1;
        let op = OPS
            .iter()
            .find(|op| op.chars().zip(i..).all(|(o, j)| at(j) == Some(o)));
        let (tok, end) = if c.is_whitespace() {
            i += 1;
            continue;
        } else if let Some(op) = op {
            (Tok::Op(op), i + op.len())
        } else if c == '"' || c == '\'' {
            string(&chars, i)?
        } else if c == '-' || c.is_ascii_digit() {
            let text: String = (chars.iter().skip(i).enumerate())
                .take_while(|&(k, ch)| ch.is_ascii_digit() || *ch == '.' || (k == 0 && *ch == '-'))
                .map(|(_, ch)| *ch)
                .collect();
            let end = i + text.len();
            match number(&text) {
                Some(n) => (Tok::Num(n), end),
                None if text.parse::<f64>().is_ok_and(f64::is_infinite) => {
                    return Err(error(column, "number out of range"))
                }
                None => return Err(error(column, format!("invalid number `{text}`"))),
            }
        } else if c.is_ascii_alphabetic() || c == '_' {
            let name: String = (chars.iter().skip(i))
                .take_while(|ch| ch.is_ascii_alphanumeric() || **ch == '_')
                .collect();
            let end = i + name.len();
            let tok = if name == "in" {
                Tok::Op("in")
            } else {
                Tok::Ident(name)
            };
            (tok, end)
        } else if matches!(c, '=' | '&' | '|') {
            return Err(error(
                column,
                format!("unexpected `{c}`; did you mean `{c}{c}`?"),
            ));
        } else {
            return Err(error(column, format!("unexpected character `{c}`")));
        };
        tokens.push((tok, column));
        i = end;
    }
    tokens.push((Tok::End, chars.len() + 1));
    Ok(tokens)
}

/// Reads the quoted string starting at `start`; returns it and the index after its closing quote.
fn string(chars: &[char], start: usize) -> Result<(Tok, usize), ConditionError> {
    let quote = chars.get(start).copied();
    let unterminated = || error(start + 1, "unterminated string");
    let mut text = String::new();
    let mut j = start + 1;
    loop {
        let c = chars.get(j).copied().ok_or_else(unterminated)?;
        if Some(c) == quote {
            return Ok((Tok::Str(text), j + 1));
        }
        if c == '\\' {
            j += 1;
            text.push(match chars.get(j).copied().ok_or_else(unterminated)? {
                'n' => '\n',
                't' => '\t',
                escaped @ ('"' | '\'' | '\\') => escaped,
                other => return Err(error(j, format!("unknown escape `\\{other}`"))),
            });
        } else {
            text.push(c);
        }
        j += 1;
    }
}

/// Reads `s` as a number if it is written like a number literal (`-12`, `3.5`) and is finite.
fn number(s: &str) -> Option<f64> {
    let unsigned = s.strip_prefix('-').unwrap_or(s);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !fraction.is_none_or(digits) {
        return None;
    }
    s.parse::<f64>().ok().filter(|n| n.is_finite())
}

// ---------------------------------------------------------------------------------------------
// Syntax tree and parser

#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Lit(Lit),
    Header(String),
    Metadata(String),
    Path,
    Method,
    Model,
    Not(Box<Expr>),
    Eq(Box<Expr>, Box<Expr>),
    In(Box<Expr>, Vec<Lit>),
    /// Chains are flat, so a long `a && b && …` adds no depth.
    And(Vec<Expr>),
    Or(Vec<Expr>),
}

/// A literal token as a value, or the token back if it is not one.
fn literal(tok: Tok) -> Result<Lit, Tok> {
    match tok {
        Tok::Str(s) => Ok(Lit::Str(s)),
        Tok::Num(n) => Ok(Lit::Num(n)),
        Tok::Ident(word) if word == "null" => Ok(Lit::Null),
        Tok::Ident(word) if word == "true" => Ok(Lit::Bool(true)),
        Tok::Ident(word) if word == "false" => Ok(Lit::Bool(false)),
        other => Err(other),
    }
}

type Parsed<T> = Result<T, ConditionError>;

struct Parser {
    tokens: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
}

const END: Tok = Tok::End;

impl Parser {
    fn peek(&self) -> (&Tok, usize) {
        match self.tokens.get(self.pos) {
            Some((tok, column)) => (tok, *column),
            None => (&END, self.tokens.last().map_or(1, |(_, c)| *c)),
        }
    }

    /// Returns the current token and moves past it (never past the end).
    fn next(&mut self) -> (Tok, usize) {
        let (tok, column) = self.peek();
        let tok = tok.clone();
        if tok != Tok::End {
            self.pos += 1;
        }
        (tok, column)
    }

    fn peek_op(&self) -> &'static str {
        match self.peek().0 {
            Tok::Op(op) => op,
            _ => "",
        }
    }

    fn eat(&mut self, op: &str) -> bool {
        let hit = self.peek_op() == op;
        if hit {
            self.next();
        }
        hit
    }

    /// An error at the current token: `expected {wanted}, found …`.
    fn unexpected(&self, wanted: &str) -> ConditionError {
        let (tok, column) = self.peek();
        let found = tok.describe();
        error(column, format!("expected {wanted}, found {found}"))
    }

    fn expect(&mut self, op: &str, context: &str) -> Parsed<()> {
        if self.eat(op) {
            return Ok(());
        }
        Err(self.unexpected(&format!("`{op}` {context}")))
    }

    fn enter(&mut self, column: usize) -> Parsed<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(error(column, format!("nesting deeper than {MAX_DEPTH}")));
        }
        Ok(())
    }

    /// Parses `operand (op operand)*` into one flat `all` node, or the lone operand.
    fn chain(
        &mut self,
        op: &str,
        operand: fn(&mut Self) -> Parsed<Expr>,
        all: fn(Vec<Expr>) -> Expr,
    ) -> Parsed<Expr> {
        let mut items = vec![operand(self)?];
        while self.eat(op) {
            items.push(operand(self)?);
        }
        Ok(match <[Expr; 1]>::try_from(items) {
            Ok([one]) => one,
            Err(items) => all(items),
        })
    }

    fn parse_or(&mut self) -> Parsed<Expr> {
        self.chain("||", Self::parse_and, Expr::Or)
    }

    fn parse_and(&mut self) -> Parsed<Expr> {
        self.chain("&&", Self::parse_comparison, Expr::And)
    }

    fn parse_comparison(&mut self) -> Parsed<Expr> {
        let left = Box::new(self.parse_unary()?);
        let op = self.peek_op();
        let expr = match op {
            "==" | "!=" => {
                self.next();
                let eq = Expr::Eq(left, Box::new(self.parse_unary()?));
                match op {
                    "==" => eq,
                    _ => Expr::Not(Box::new(eq)),
                }
            }
            "in" => {
                self.next();
                Expr::In(left, self.parse_list()?)
            }
            _ => return Ok(*left),
        };
        match self.peek_op() {
            "==" | "!=" | "in" => {
                Err(self.unexpected("`&&`, `||` or `)` (comparisons do not chain)"))
            }
            _ => Ok(expr),
        }
    }

    fn parse_unary(&mut self) -> Parsed<Expr> {
        let column = self.peek().1;
        if !self.eat("!") {
            return self.parse_primary();
        }
        self.enter(column)?;
        let inner = self.parse_unary()?;
        self.depth -= 1;
        Ok(Expr::Not(Box::new(inner)))
    }

    fn parse_primary(&mut self) -> Parsed<Expr> {
        let (tok, column) = self.next();
        match tok {
            Tok::Op("(") => {
                self.enter(column)?;
                let inner = self.parse_or()?;
                self.expect(")", &format!("to close the `(` at column {column}"))?;
                self.depth -= 1;
                Ok(inner)
            }
            Tok::Op("[") => Err(error(column, "a list is only allowed after `in`")),
            Tok::Ident(word) if word == "model" => Ok(Expr::Model),
            Tok::Ident(word) if word == "request" => self.parse_request(),
            Tok::Ident(word) if word == "metadata" => self.parse_metadata(),
            tok => match literal(tok) {
                Ok(lit) => Ok(Expr::Lit(lit)),
                Err(Tok::Ident(word)) => Err(error(
                    column,
                    format!(
                        "unknown identifier `{word}`; expected request, model, metadata, \
                         true, false or null"
                    ),
                )),
                Err(other) => Err(error(
                    column,
                    format!("expected a value, found {}", other.describe()),
                )),
            },
        }
    }

    fn parse_request(&mut self) -> Parsed<Expr> {
        self.expect(".", "after `request`")?;
        match self.next() {
            (Tok::Ident(field), _) if field == "headers" => {
                let name = self.parse_key("request.headers")?;
                Ok(Expr::Header(name.to_ascii_lowercase()))
            }
            (Tok::Ident(field), _) if field == "path" => Ok(Expr::Path),
            (Tok::Ident(field), _) if field == "method" => Ok(Expr::Method),
            (tok, column) => Err(error(
                column,
                format!(
                    "unknown field {} of `request`; expected headers, path or method",
                    tok.describe()
                ),
            )),
        }
    }

    fn parse_metadata(&mut self) -> Parsed<Expr> {
        if !self.eat(".") {
            return Ok(Expr::Metadata(self.parse_key("metadata")?));
        }
        match self.peek().0 {
            Tok::Ident(key) => {
                let key = key.clone();
                self.next();
                Ok(Expr::Metadata(key))
            }
            _ => Err(self.unexpected("a key name after `metadata.`")),
        }
    }

    /// Parses `["key"]` after `owner`.
    fn parse_key(&mut self, owner: &str) -> Parsed<String> {
        self.expect("[", &format!("after `{owner}`"))?;
        let key = match self.peek().0 {
            Tok::Str(key) => key.clone(),
            _ => return Err(self.unexpected(&format!("a quoted name inside `{owner}[...]`"))),
        };
        self.next();
        self.expect("]", &format!("to close `{owner}[`"))?;
        Ok(key)
    }

    /// Parses the list literal after `in`: scalar literals only, an optional trailing comma.
    fn parse_list(&mut self) -> Parsed<Vec<Lit>> {
        if !self.eat("[") {
            return Err(self.unexpected("a list like `[\"a\", \"b\"]` after `in`"));
        }
        let mut items = Vec::new();
        while !self.eat("]") {
            match self.next() {
                (Tok::End, column) => return Err(error(column, "expected `]` to close the list")),
                (tok, column) => match literal(tok) {
                    Ok(lit) => items.push(lit),
                    Err(_) => return Err(error(column, "list elements must be literals")),
                },
            }
            if !self.eat(",") && self.peek_op() != "]" {
                return Err(self.unexpected("`,` or `]` in the list"));
            }
        }
        Ok(items)
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation

#[derive(Debug, Clone, Copy)]
enum Val<'a> {
    Null,
    Bool(bool),
    Num(f64),
    Str(&'a str),
}

impl Val<'_> {
    /// A value used as a condition: `null`, `false`, `""` and `"false"` are false.
    fn truthy(self) -> bool {
        match self {
            Val::Null => false,
            Val::Bool(b) => b,
            Val::Num(_) => true,
            Val::Str(s) => !s.is_empty() && s != "false",
        }
    }
}

impl Lit {
    fn val(&self) -> Val<'_> {
        match self {
            Lit::Null => Val::Null,
            Lit::Bool(b) => Val::Bool(*b),
            Lit::Num(n) => Val::Num(*n),
            Lit::Str(s) => Val::Str(s),
        }
    }
}

/// `==`: same kind and value; a string meets a number numerically and a boolean as its text.
fn equal(a: Val<'_>, b: Val<'_>) -> bool {
    match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Num(x), Val::Num(y)) => x == y,
        (Val::Str(x), Val::Str(y)) => x == y,
        (Val::Str(s), Val::Num(n)) | (Val::Num(n), Val::Str(s)) => number(s) == Some(n),
        (Val::Str(s), Val::Bool(b)) | (Val::Bool(b), Val::Str(s)) => {
            s == if b { "true" } else { "false" }
        }
        _ => false,
    }
}

impl Expr {
    fn value<'a>(&'a self, facts: &'a dyn Facts) -> Val<'a> {
        let text = |v: Option<&'a str>| v.map_or(Val::Null, Val::Str);
        match self {
            Expr::Lit(lit) => lit.val(),
            Expr::Header(name) => text(facts.header(name)),
            Expr::Metadata(key) => text(facts.metadata(key)),
            Expr::Path => Val::Str(facts.path()),
            Expr::Method => Val::Str(facts.method()),
            Expr::Model => Val::Str(facts.model()),
            Expr::Not(inner) => Val::Bool(!inner.value(facts).truthy()),
            Expr::Eq(a, b) => Val::Bool(equal(a.value(facts), b.value(facts))),
            Expr::In(a, list) => {
                let left = a.value(facts);
                let found =
                    !matches!(left, Val::Null) && list.iter().any(|item| equal(left, item.val()));
                Val::Bool(found)
            }
            Expr::And(items) => Val::Bool(items.iter().all(|e| e.value(facts).truthy())),
            Expr::Or(items) => Val::Bool(items.iter().any(|e| e.value(facts).truthy())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Req {
        headers: Vec<(&'static str, &'static str)>,
        metadata: Vec<(&'static str, &'static str)>,
        model: &'static str,
        path: &'static str,
        method: &'static str,
    }

    impl Facts for Req {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| *v)
        }
        fn metadata(&self, key: &str) -> Option<&str> {
            self.metadata
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| *v)
        }
        fn model(&self) -> &str {
            self.model
        }
        fn path(&self) -> &str {
            self.path
        }
        fn method(&self) -> &str {
            self.method
        }
    }

    fn headers(headers: &[(&'static str, &'static str)]) -> Req {
        Req {
            headers: headers.to_vec(),
            ..Req::default()
        }
    }

    fn eval(src: &str, req: &Req) -> bool {
        Condition::parse(src)
            .unwrap_or_else(|e| panic!("{src}: {e}"))
            .eval(req)
    }

    fn err(src: &str) -> (usize, String) {
        let e = Condition::parse(src).unwrap_err();
        (e.column, e.message)
    }

    #[test]
    fn seed_example_matches_a_header_value() {
        let src = r#"request.headers["x-tier"] == "free""#;
        assert!(eval(src, &headers(&[("x-tier", "free")])));
        assert!(!eval(src, &headers(&[("x-tier", "pro")])));
        assert!(
            !eval(src, &headers(&[("x-tier", "Free")])),
            "case-sensitive"
        );
    }

    #[test]
    fn seed_example_matches_metadata_in_a_list() {
        let src = r#"metadata.region in ["eu", "uk"]"#;
        let req = |region| Req {
            metadata: vec![("region", region)],
            ..Req::default()
        };
        assert!(eval(src, &req("eu")));
        assert!(eval(src, &req("uk")));
        assert!(!eval(src, &req("us")));
        assert!(!eval(src, &Req::default()));
    }

    #[test]
    fn metadata_keys_with_dashes_use_brackets() {
        let req = Req {
            metadata: vec![("team-name", "search")],
            ..Req::default()
        };
        assert!(eval(r#"metadata["team-name"] == 'search'"#, &req));
    }

    #[test]
    fn path_method_and_model_are_readable() {
        let req = Req {
            model: "gpt-x",
            path: "/v1/chat/completions",
            method: "POST",
            ..Req::default()
        };
        assert!(eval(
            r#"model == "gpt-x" && request.path == "/v1/chat/completions" && request.method == "POST""#,
            &req
        ));
        assert!(eval(r#"request.method in ["GET", "POST"]"#, &req));
    }

    #[test]
    fn not_binds_tighter_than_and_which_binds_tighter_than_or() {
        let req = Req::default();
        assert!(eval("true || false && false", &req), "&& before ||");
        assert!(!eval("(true || false) && false", &req));
        assert!(!eval("!true || false", &req), "! before ||");
        assert!(eval("!(true && false)", &req));
        assert!(eval("!false && !false", &req));
        assert!(eval("!!true", &req));
        // `!` applies to the operand, then `==` compares booleans.
        assert!(eval("!false == true", &req));
        assert!(eval(r#"model == "" || model == "x" && false"#, &req));
    }

    #[test]
    fn bare_values_are_true_when_present_non_empty_and_not_false() {
        let src = r#"request.headers["x-beta"]"#;
        assert!(eval(src, &headers(&[("x-beta", "1")])));
        assert!(eval(src, &headers(&[("x-beta", "yes")])));
        assert!(!eval(src, &headers(&[("x-beta", "")])));
        assert!(!eval(src, &headers(&[("x-beta", "false")])));
        assert!(!eval(src, &headers(&[])));
        assert!(eval(r#"!request.headers["x"]"#, &headers(&[])));
        assert!(!eval(r#"!request.headers["x"]"#, &headers(&[("x", "on")])));
        assert!(eval("true", &Req::default()));
        assert!(!eval("false", &Req::default()));
        assert!(!eval("null", &Req::default()));
    }

    #[test]
    fn missing_header_is_null() {
        let none = headers(&[]);
        assert!(eval(r#"request.headers["x"] == null"#, &none));
        assert!(!eval(r#"request.headers["x"] == "x""#, &none));
        assert!(eval(r#"request.headers["x"] != "x""#, &none));
        assert!(!eval(r#"request.headers["x"] in ["x", "y"]"#, &none));
        assert!(!eval(r#"request.headers["x"] in [null]"#, &none));
        assert!(!eval(r#"request.headers["x"] == """#, &none));
        assert!(!eval(
            r#"request.headers["x"] == null"#,
            &headers(&[("x", "")])
        ));
        assert!(eval("null == null", &none));
        assert!(!eval("null == false", &none));
    }

    #[test]
    fn numbers_compare_numerically_with_numeric_strings() {
        let src = r#"request.headers["x-n"] == 5"#;
        assert!(eval(src, &headers(&[("x-n", "5")])));
        assert!(eval(src, &headers(&[("x-n", "5.0")])));
        assert!(!eval(src, &headers(&[("x-n", "6")])));
        assert!(!eval(src, &headers(&[("x-n", "five")])));
        assert!(!eval(src, &headers(&[("x-n", " 5")])));
        assert!(!eval(src, &headers(&[("x-n", "5e0")])));
        assert!(eval(
            src.replace("==", "!=").as_str(),
            &headers(&[("x-n", "five")])
        ));
        assert!(eval(
            r#"request.headers["x-n"] == -1.5"#,
            &headers(&[("x-n", "-1.50")])
        ));
        assert!(eval(
            r#"request.headers["x-n"] in [1, 2, 3]"#,
            &headers(&[("x-n", "3")])
        ));
        assert!(eval("5 == 5.0", &Req::default()));
        assert!(
            !eval(r#""5" == "5.0""#, &Req::default()),
            "strings compare exactly"
        );
    }

    #[test]
    fn booleans_compare_to_their_text() {
        let src = r#"request.headers["x-beta"] == true"#;
        assert!(eval(src, &headers(&[("x-beta", "true")])));
        assert!(!eval(src, &headers(&[("x-beta", "True")])));
        assert!(!eval(src, &headers(&[("x-beta", "1")])));
        assert!(!eval("1 == true", &Req::default()));
    }

    #[test]
    fn header_names_are_case_insensitive() {
        let req = headers(&[("x-tier", "free")]);
        assert!(eval(r#"request.headers["X-Tier"] == "free""#, &req));
        assert!(eval(r#"request.headers["X-TIER"] == "free""#, &req));
    }

    #[test]
    fn single_quotes_and_escapes_are_understood() {
        let req = headers(&[("q", "it's \"quoted\"\\\n\t")]);
        assert!(eval(
            r#"request.headers['q'] == 'it\'s "quoted"\\\n\t'"#,
            &req
        ));
        assert!(eval(
            r#"request.headers["q"] == "it's \"quoted\"\\\n\t""#,
            &req
        ));
    }

    #[test]
    fn lists_accept_every_literal_kind_and_a_trailing_comma() {
        let req = headers(&[("x", "true")]);
        assert!(eval(r#"request.headers["x"] in [null, 1, true,]"#, &req));
        assert!(!eval(r#"request.headers["x"] in []"#, &req));
    }

    #[test]
    fn every_parse_error_points_at_its_column() {
        let cases: &[(&str, usize, &str)] = &[
            ("reqest.path", 1, "unknown identifier `reqest`"),
            ("request.pth", 9, "unknown field `pth`"),
            (r#"model == "abc"#, 10, "unterminated string"),
            ("model == 'a\\", 10, "unterminated string"),
            (r#"model == "a\q""#, 12, "unknown escape `\\q`"),
            (
                "(model == 'a'",
                14,
                "expected `)` to close the `(` at column 1",
            ),
            (
                "model == 'a' )",
                14,
                "unexpected `)` after a complete expression",
            ),
            ("model == 'a' model", 14, "unexpected `model`"),
            ("model in 'a'", 10, "expected a list"),
            ("model in", 9, "expected a list"),
            ("model in [model]", 11, "list elements must be literals"),
            ("model in ['a' 'b']", 15, "expected `,` or `]`"),
            (
                "model in ['a'",
                14,
                "expected `,` or `]` in the list, found end of input",
            ),
            ("model in ['a',", 15, "expected `]` to close the list"),
            ("", 1, "empty expression"),
            ("   ", 4, "empty expression"),
            ("model &&", 9, "expected a value, found end of input"),
            ("model = 'a'", 7, "did you mean `==`?"),
            ("model & true", 7, "did you mean `&&`?"),
            ("model | true", 7, "did you mean `||`?"),
            ("model == #", 10, "unexpected character `#`"),
            ("model == 1.", 10, "invalid number `1.`"),
            ("model == 1.2.3", 10, "invalid number `1.2.3`"),
            ("model == -x", 10, "invalid number `-`"),
            ("model == 'a' == 'b'", 14, "comparisons do not chain"),
            ("['a'] == model", 1, "a list is only allowed after `in`"),
            ("request", 8, "expected `.` after `request`"),
            (
                "request.headers.x",
                16,
                "expected `[` after `request.headers`",
            ),
            ("request.headers[x]", 17, "expected a quoted name"),
            ("request.headers['x'", 20, "expected `]`"),
            ("metadata", 9, "expected `[` after `metadata`"),
            ("metadata.'x'", 10, "expected a key name"),
            ("'é' == reqest", 8, "unknown identifier"),
        ];
        for (src, column, message) in cases {
            let (c, m) = err(src);
            assert_eq!(c, *column, "{src}: {m}");
            assert!(m.contains(message), "{src}: `{m}` lacks `{message}`");
        }
        let huge = format!("model == {}", "9".repeat(400));
        assert_eq!(err(&huge), (10, "number out of range".to_string()));
    }

    #[test]
    fn error_displays_its_column() {
        let e = Condition::parse("reqest.path").unwrap_err();
        assert!(e
            .to_string()
            .starts_with("column 1: unknown identifier `reqest`"));
    }

    #[test]
    fn nesting_up_to_64_is_fine_and_deeper_is_refused() {
        let ok = format!("{}true{}", "(".repeat(64), ")".repeat(64));
        assert!(eval(&ok, &Req::default()));
        let deep = format!("{}true{}", "(".repeat(65), ")".repeat(65));
        let (column, message) = err(&deep);
        assert_eq!(column, 65);
        assert!(message.contains("deeper than 64"));
        let (column, _) = err(&format!("{}true", "!".repeat(65)));
        assert_eq!(column, 65);
        let (column, _) = err(&format!("{}true{}", "(!".repeat(33), ")".repeat(33)));
        assert_eq!(column, 65);
        // Huge nesting must be refused, not overflow the stack.
        assert!(Condition::parse(&"(".repeat(100_000)).is_err());
    }

    #[test]
    fn long_flat_chains_parse_and_evaluate() {
        let src = vec!["true"; 50_000].join(" && ");
        assert!(eval(&src, &Req::default()));
        let src = vec!["false"; 50_000].join(" || ");
        assert!(!eval(&src, &Req::default()));
    }

    /// A random expression in the grammar, as tokens.
    fn random_expr(rng: &mut fastrand::Rng, depth: usize, out: &mut Vec<&'static str>) {
        const VALUES: &[&str] = &[
            "request.headers[\"x\"]",
            "request.headers['Y']",
            "request.path",
            "request.method",
            "model",
            "metadata.region",
            "metadata[\"a-b\"]",
            "null",
            "true",
            "false",
            "5",
            "-1.5",
            "'eu'",
            "\"5.0\"",
        ];
        match if depth == 0 { 0 } else { rng.u8(0..6) } {
            0 => out.push(VALUES[rng.usize(..VALUES.len())]),
            1 => {
                out.push("!");
                random_expr(rng, depth - 1, out);
            }
            2 => {
                out.push("(");
                random_expr(rng, depth - 1, out);
                out.push(")");
            }
            3 => {
                out.push(VALUES[rng.usize(..VALUES.len())]);
                out.push(["==", "!="][rng.usize(..2)]);
                out.push(VALUES[rng.usize(..VALUES.len())]);
            }
            4 => {
                out.push(VALUES[rng.usize(..VALUES.len())]);
                out.push("in [\"eu\", 5, null, true]");
            }
            _ => {
                random_expr(rng, depth - 1, out);
                out.push(["&&", "||"][rng.usize(..2)]);
                random_expr(rng, depth - 1, out);
            }
        }
    }

    #[test]
    fn random_inputs_never_panic() {
        let mut rng = fastrand::Rng::with_seed(0x5eed);
        let req = Req {
            headers: vec![("x", "5"), ("y", "false"), ("z", "")],
            metadata: vec![("region", "eu")],
            model: "m",
            path: "/p",
            method: "POST",
        };
        let vocab = [
            "request", ".", "headers", "[", "]", "\"x\"", "'y'", "path", "method", "model",
            "metadata", "region", "in", "==", "!=", "!", "&&", "||", "(", ")", ",", "null", "true",
            "false", "5", "-1.5", "\"", "'", "\\", "=", "&", "|", "-", "1.", "é", " ",
        ];
        let mut parsed = 0;
        for round in 0..6_000 {
            let src = match round % 3 {
                0 => {
                    let bytes: Vec<u8> = (0..rng.usize(0..40)).map(|_| rng.u8(..)).collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                }
                1 => (0..rng.usize(0..24))
                    .map(|_| vocab[rng.usize(..vocab.len())])
                    .collect::<Vec<_>>()
                    .join(if rng.bool() { " " } else { "" }),
                _ => {
                    // A valid expression, half the time with one token inserted or removed.
                    let mut tokens = Vec::new();
                    random_expr(&mut rng, 5, &mut tokens);
                    let at = rng.usize(..=tokens.len());
                    match rng.u8(0..4) {
                        0 => tokens.insert(at, vocab[rng.usize(..vocab.len())]),
                        1 if at < tokens.len() => drop(tokens.remove(at)),
                        _ => {}
                    }
                    tokens.join(" ")
                }
            };
            match Condition::parse(&src) {
                Ok(c) => {
                    parsed += 1;
                    let _ = c.eval(&req);
                    let _ = c.eval(&Req::default());
                }
                Err(e) => {
                    let width = src.chars().count() + 1;
                    assert!((1..=width).contains(&e.column), "{src:?}: {e}");
                }
            }
        }
        assert!(parsed > 1_000, "only {parsed} inputs parsed");
    }
}
