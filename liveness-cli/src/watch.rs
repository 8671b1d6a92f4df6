//! `liveness watch`: members with their time left, item counts and the latest deaths,
//! redrawn in place until Ctrl-C.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use liveness::Space;
use serde::Serialize;

use crate::deaths::{self, DeathRow};
use crate::items::{self, Counts};
use crate::members::{self, MemberRow};
use crate::output::{duration, header, json_line};
use crate::{Ctx, Failure};

/// The members and deaths one frame shows at most.
const SHOWN: usize = 20;

/// One refresh, as `--json` prints it (one line each).
#[derive(Debug, Serialize)]
struct Frame {
    members: Vec<MemberRow>,
    items: Counts,
    deaths: Vec<DeathRow>,
}

async fn frame(ctx: &Ctx, space: &Space) -> Result<Frame, Failure> {
    Ok(Frame {
        members: members::list(ctx, space, SHOWN)
            .await?
            .iter()
            .map(Into::into)
            .collect(),
        items: Counts::new(ctx.store.item_counts().await?, &ctx.store.capabilities()),
        deaths: deaths::list(ctx, None, SHOWN).await?,
    })
}

fn render(ctx: &Ctx, space: &Space, every: Duration, f: &Frame) -> String {
    format!(
        "liveness watch: {} (every {}; Ctrl-C to quit)\n\n\
         {space} (first {SHOWN})\n{}\n\nitems\n{}\n\nlatest deaths\n{}\n",
        header(ctx),
        duration(every),
        members::render(&f.members, false),
        items::render_counts(&f.items),
        deaths::render(&f.deaths),
    )
}

pub(crate) async fn run(ctx: &Ctx, space: &str, every: Duration) -> Result<(), Failure> {
    let space = Space::new(space)?;
    let tty = std::io::stdout().is_terminal();
    let stop = crate::check::shutdown();
    tokio::pin!(stop);
    loop {
        let text = match crate::within(ctx.timeout, frame(ctx, &space)).await {
            Ok(f) if ctx.json => json_line(&f)?,
            Ok(f) => render(ctx, &space, every, &f),
            // A store that stops answering is shown, not fatal: the view goes on.
            Err(Failure::Unreachable(why)) => format!("store not answering: {why}"),
            Err(other) => return Err(other),
        };
        {
            let mut out = std::io::stdout().lock();
            // Home and clear-to-end: redraw in place on a terminal.
            let clear = if tty && !ctx.json {
                "\x1b[H\x1b[2J"
            } else {
                ""
            };
            let _ = writeln!(out, "{clear}{text}");
            let _ = out.flush();
        }
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(every) => {}
        }
    }
}
