/**
 * A model option this model or adapter cannot take (a form that does not run here, a layout the
 * weights cannot have, a limit past the model's, a shape the kernels do not take), found while
 * the model is built, before any step runs. The CLI prints its message without a stack trace and
 * exits 2, as for bad usage.
 */
export class ModelOptionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelOptionError";
  }
}
