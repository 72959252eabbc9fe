// What the component exports: the reconciler, bound to the host's imports.
// The reconciler lives in its own module so that tests import it without them.
import { exportReconciler } from "@wasmctrl/sdk/component";

import { {{Reconciler}} } from "./{{plugin}}.js";

export const { metadata, reconcile } = exportReconciler(new {{Reconciler}}());
