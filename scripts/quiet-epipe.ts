// A report CLI piped into a reader that stops early (`npm run -s compare -- … | head`): the closed
// pipe's EPIPE ends the process with status 0, as SIGPIPE ends a Unix tool, instead of Node's
// unhandled 'error' trace. Any other stdout error is still thrown.
export function exitQuietlyWhenStdoutCloses(): void {
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(0);
    throw err;
  });
}
