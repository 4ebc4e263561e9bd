// Runs the crate's unit tests built for wasm32-wasip1 (the .wasm's target: 32-bit `usize`,
// Wasm SIMD) in Node's V8 through its WASI, so the core is tested as the .wasm runs it, not
// only as the host compiles it:
//   node --experimental-wasi-unstable-preview1 scripts/wasm_unit.mjs TEST.wasm [libtest args]
// The proxy-wasm host calls are imported but never called by the core's tests: each one
// throws if a test reaches it. Wasm has no unwinding, so a failing test aborts the run
// (non-zero exit) after libtest prints its message.
import { readFile } from 'node:fs/promises';
import { WASI } from 'node:wasi';

const [file, ...args] = process.argv.slice(2);
// Tests that read the repository's files find them under the working directory.
const wasi = new WASI({
  version: 'preview1',
  args: ['test', ...args],
  env: {},
  preopens: { [process.cwd()]: process.cwd() },
});
const module = await WebAssembly.compile(await readFile(file));
const imports = wasi.getImportObject();
for (const { module: from, name } of WebAssembly.Module.imports(module)) {
  if (from === 'wasi_snapshot_preview1') continue;
  imports[from] ??= {};
  imports[from][name] = () => {
    throw new Error(`host call ${from}.${name} reached from a unit test`);
  };
}
const instance = await WebAssembly.instantiate(module, imports);
// A test binary built for proxy-wasm is a WASI reactor and command at once; `start` runs the
// command and refuses an instance that also exports `_initialize`.
const exports = Object.fromEntries(
  Object.entries(instance.exports).filter(([name]) => name !== '_initialize'),
);
process.exitCode = wasi.start({ exports });
