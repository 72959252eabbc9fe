// The component's entry: what `wasmctrl build` componentizes.
import { exportReconciler } from "@wasmctrl/sdk/component";

import { WebAppReconciler } from "./webapp.js";

export const { metadata, reconcile } = exportReconciler(new WebAppReconciler());
