//! Draws the plots and the report of a run directory without building the simulator:
//! `cargo run -p dasim-reports --example plot_run -- RUN_DIR [OUT_DIR]` (default: `RUN_DIR`).
//! With several run directories and `--overlay OUT_DIR`, draws their overlay instead.

use std::path::PathBuf;

fn main() -> dasim_reports::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--overlay") {
        let out = PathBuf::from(&args[i + 1]);
        let dirs: Vec<PathBuf> = args[..i].iter().map(PathBuf::from).collect();
        for p in dasim_reports::plot_runs(&dirs, &out)? {
            println!("{}", p.display());
        }
        return Ok(());
    }
    let run = PathBuf::from(args.first().map_or("runs/quickstart", String::as_str));
    let out = args.get(1).map_or_else(|| run.clone(), PathBuf::from);
    for p in dasim_reports::plot_run_to(&run, &out)? {
        println!("{}", p.display());
    }
    let report = dasim_reports::write_report(&run, &out.join("report.html"), &Default::default())?;
    println!("{}", report.display());
    Ok(())
}
