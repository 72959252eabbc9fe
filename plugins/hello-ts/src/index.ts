import { exportReconciler } from "@wasmctrl/sdk/component";

import { Hello } from "./hello.js";

export const { metadata, reconcile } = exportReconciler(new Hello());
