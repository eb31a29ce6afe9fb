//! Man pages generated from the clap definitions (checked for staleness by a test).

use clap::CommandFactory;

use crate::cli::Cli;

/// Renders `memperf.1` and one page per subcommand (`memperf-record.1`, ...).
pub fn render_all() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let cmd = Cli::command();
    let mut pages = Vec::new();
    let mut top = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut top)?;
    pages.push(("memperf.1".to_string(), top));
    for sub in cmd.get_subcommands() {
        // The page is memperf-leak(1), as git's are; its synopsis says what one types.
        let name = format!("memperf-{}", sub.get_name());
        let typed = format!("memperf {}", sub.get_name());
        let sub = sub.clone().name(name.clone()).bin_name(typed);
        let mut buf = Vec::new();
        clap_mangen::Man::new(sub).render(&mut buf)?;
        pages.push((format!("{name}.1"), buf));
    }
    Ok(pages)
}
