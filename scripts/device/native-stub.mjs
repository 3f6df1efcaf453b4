// Stands in for sharp in the device bundle (build.mjs): transformers.js imports it at load time in
// Node and only needs it to be there; the tokenizer never decodes an image. A call fails loudly.
export default function sharpNotBundled() {
  throw new Error('sharp (image decoding) is not part of the device bundle');
}
