// Module hooks for server.mjs: @parca/client's files are ES modules in a package that does
// not say so (no "type": "module"), and they import each other without the `.js` a bundler
// would add (`../../../google/protobuf/duration`), which Node's own resolution refuses. They
// are loaded as modules, and a relative import Node cannot find is tried again with `.js`.
export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (e) {
    if (e?.code === "ERR_MODULE_NOT_FOUND" && specifier.startsWith(".")) {
      return next(`${specifier}.js`, context);
    }
    throw e;
  }
}

export async function load(url, context, next) {
  if (url.includes("/node_modules/@parca/client/dist/")) {
    return next(url, { ...context, format: "module" });
  }
  return next(url, context);
}
