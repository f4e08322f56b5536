//! The helper that sets up one native worker's sandbox and runs its program
//! (see `zorilla_sandbox::native`). Started by the node, never by hand: its
//! standard input is the node's status pipe, its arguments the worker's
//! plan.

fn main() {
    zorilla_sandbox::native::init_main()
}
