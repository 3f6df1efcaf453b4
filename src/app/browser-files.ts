// Browser plumbing for files, kept out of the components: what a drop hands us (files, or folders to
// walk), and saving a Blob as a download.

/** Reads every entry of a dropped directory (readEntries returns them in batches). */
function readAllEntries(dir: FileSystemDirectoryEntry): Promise<FileSystemEntry[]> {
  const reader = dir.createReader();
  const all: FileSystemEntry[] = [];
  return new Promise((resolve, reject) => {
    const next = () =>
      reader.readEntries((batch) => {
        if (batch.length === 0) resolve(all);
        else {
          all.push(...batch);
          next();
        }
      }, reject);
    next();
  });
}

async function filesOf(entry: FileSystemEntry, depth: number): Promise<File[]> {
  if (entry.isFile) {
    const file = await new Promise<File>((resolve, reject) =>
      (entry as FileSystemFileEntry).file(resolve, reject),
    );
    return [file];
  }
  if (entry.isDirectory && depth < 4) {
    const out: File[] = [];
    for (const child of await readAllEntries(entry as FileSystemDirectoryEntry)) {
      out.push(...(await filesOf(child, depth + 1)));
    }
    return out;
  }
  return [];
}

/**
 * The files of a drop: plain files as they are, and the files inside dropped folders (a model
 * folder dragged from the file manager). The entries must be taken synchronously in the drop
 * handler, so call this before any await.
 */
export function droppedFiles(data: DataTransfer): Promise<File[]> {
  const entries: FileSystemEntry[] = [];
  const plain: File[] = [];
  for (const item of Array.from(data.items)) {
    if (item.kind !== 'file') continue;
    const entry = typeof item.webkitGetAsEntry === 'function' ? item.webkitGetAsEntry() : null;
    if (entry) entries.push(entry);
    else {
      const f = item.getAsFile();
      if (f) plain.push(f);
    }
  }
  if (entries.length === 0 && plain.length === 0) return Promise.resolve(Array.from(data.files));
  return Promise.all(entries.map((e) => filesOf(e, 0))).then((lists) => [...plain, ...lists.flat()]);
}

/** Offers `blob` as a download named `fileName` (one file per click: pack folders into a zip). */
export function saveBlob(blob: Blob, fileName: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = fileName;
  a.style.display = 'none';
  document.body.appendChild(a);
  a.click();
  a.remove();
  // The download has started reading the blob by now; keep the URL a while for slow starts.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
