use leasesim_graphile_model::Db;

#[test]
fn captures() {
    let db = Db::new("graphile_worker");
    let n = db.recognized().count();
    assert!(n > 40, "{n}");
    for (text, stmt) in db.recognized() {
        println!("{stmt:?}: {}", &text[..text.len().min(90)]);
    }
}
