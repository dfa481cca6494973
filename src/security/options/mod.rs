//! Placeholder until the option tables land (same API).

#[derive(Debug, Default, Clone)]
pub struct Parsed {
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    pub read_dirs_recursive: Vec<String>,
    pub writes_anything: bool,
    pub follows_symlinks_recursively: bool,
    pub git_subcommand: Option<usize>,
}

pub fn parse(_program: &str, _args: &[String]) -> Option<Result<Parsed, String>> {
    None
}

pub fn has_table(_program: &str) -> bool {
    false
}
