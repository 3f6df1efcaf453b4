// A CLI piped into a reader that stops early (`npm run -s compare -- … | head`): the closed pipe's
// EPIPE would otherwise end the process with Node's unhandled 'error' trace, before it finishes its
// work (an evaluation's --json file, say). With this, later output is dropped and the work goes on to
// its normal end and status. Any other stdout error is still thrown.
export function keepWorkingWhenStdoutCloses(): void {
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED') return; // nobody reads any more
    throw err;
  });
}
