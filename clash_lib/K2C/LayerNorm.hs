{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType, TypeFamilies,
             AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=16 #-}
{-|
A Keras @LayerNormalization@ of the last axis: each beat of @c@ values is
normalized by its own mean and variance,
@y = activation (requantize ((x - mean) / sqrt (var + eps) * gamma + beta))@.

= Arithmetic (docs/guide/contract.md, "Layer normalization")

With the raw inputs @x_i@ (@f@ fraction bits):

1. @S = sum x_i@, @d_i = c x_i - S@ in @Signed bd@ (exact: @c (x_i - mean) 2^f@);
2. @u = sum d_i^2 + e@ in @Unsigned (2 hm)@, exact; @e = round (c^3 2^(2f) eps)@;
3. @k@ the leading zero bit pairs of @u@, so @u 4^k@ has its top pair non-zero:
   @u = m 4^h@ with @h = hm - k@ and the mantissa @m@ in @[1/4, 1)@; the table
   index @j@ is the top @n@ bits of @u 4^k@ less @2^(n-2)@ (0 when @u = 0@);
4. the table entry @T[j]@ (@SFixed ti r@) is @sqrt (c / m)@, so
   @sqrt (c / u) = T[j] 2^-h@ up to the table's error (its bound is written
   next to the layer in Network.hs);
5. @gamma_i d_i@ (exact) shifted left by @k@ is @gamma_i d_i 2^(hm - h)@, an
   @SFixed (iw + 1) (fw + hm)@ (@|d_i| < 2^h@ since @d_i^2 <= u < 4^h@);
   its exact product with @T[j]@ plus @beta_i@ is the value, exactly
   @gamma_i z_i + beta_i@ with the table's @r@, which the caller's @finish@
   rounds once (round half up, saturate) and activates.

Every step before the table is exact, and so are the products after it:
the golden model (keras2clash.kinds.layernorm) computes the same integers.

= Hardware, timing, protocol

A beat a cycle in 'LayerNormDepth' register stages on "K2C.Pipe": the input
beat (the producer's queue is LUT RAM, read combinationally), the sum @S@ (an
adder tree), the deviations (@c x_i@ as shifts and adds of the constant's
bits, then a subtraction: no multiplier), the partial products of the squares
and of @gamma_i d_i@ (side by side), their sums, @u@ (an adder tree), the
leading pairs (a priority encoder), the table index (a barrel shift), the
table read (a block RAM with its synchronous read, beside the shift of
@gamma_i d_i@), its output register, a register in the fabric, the partial
products with the table's entry, their sums, then the sum with beta, the
rounding and the activation. Its timing is "K2C.Pipe"'s with @d = 14@.

A product is wider than one 18x18 multiplier (@d_i@ has the input's width
and @log2 c + 1@ bits more), so each is computed as 'partials': the operands
cut into limbs of 17 bits (the top one 18 bits, signed), one MULT18X18D per
pair of limbs, each registered, and summed in the next stage
('joinPartials'). Left to synthesis, the blocks' outputs would be summed in
the cycle of the multiplication, after the block's slow unregistered output
(an 8-channel layer on ECP5: 12.5 ns, 80 MHz).

= Fewer multipliers: 'layerNormLanes'

Where beats come slower than one a cycle, 'layerNormLanes' computes @l@ of the
@c = k * l@ channels a cycle with the same arithmetic: the beat is scattered
twice into its @k@ chunks ("K2C.Scatter" of @2 k@), each chunk a beat of one
pipeline of 'LayerNormLanesDepth' stages, and the second pass's chunks
collected ("K2C.Collect" of @2 k@; the first pass's values are dropped, and
with them their registers). The first pass sums @x_i@ and @x_i^2@ over the
chunks (running sums, one 18x18 product a lane at inputs of up to 18 bits);
its last chunk leaves with @S@ and @sum x_i^2@, and @u = c (c sum x_i^2 - S^2)
+ e@, the same integer as @sum d_i^2 + e@ (computed modulo @2^(2 hm)@, which
holds it), then the leading pairs, the table index and the table read. The
values a second-pass chunk needs of its beat (@S@, the leading pairs, the
table's entry) are kept in a register each as the first pass's last chunk
leaves their stage: the chunks move in order and never stall inside the
pipeline, so the second pass reads them after they are written and before the
next beat's first pass replaces them. The second pass computes @d_i@,
@gamma_i d_i@, its shift and its product with the entry as 'layerNorm' does,
the product's partial products registered once more in the fabric before
their sum. @S@ and @sum x_i^2@ are registered once more before @S^2@'s
multipliers, and @S^2@'s partial products once more in the fabric, so no
adder ends in a multiplier's input and no multiplier's output in two
carry chains.
A beat every @2 k + 1@ cycles; multipliers per lane: @x_i^2@, @gamma_i d_i@ and
the product with the entry, and @S^2@ once.

= Storage

The table is a memory file (@weights/<layer>_rsqrt.mem@, one entry per line
in ASCII binary), read as "K2C.Lut"'s 'TableRom' (an asynchronous ROM): the
register after the read becomes the block RAM's synchronous read, the next
its output register. A 'Vec' of the entries in @Weights.hs@ would do the
same in simulation, but Clash takes minutes to evaluate one of 768 entries.
-}
module K2C.LayerNorm
  ( layerNorm
  , LayerNormDepth
  , layerNormLanes
  , LayerNormLanesDepth
  , timesConst
  , leadingPairs
  , tableIndex
  , Limbs
  , limbs
  , partials
  , joinPartials
  ) where

import Clash.Prelude hiding (scatter)
import Data.Maybe (fromMaybe, isJust)

import K2C.Collect (collect)
import K2C.Lut (TableRom (..))
import K2C.Merge (addExact)
import K2C.Pipe (pipeS, stageReg)
import K2C.Scatter (scatter)
import K2C.Stream (Stream, mapS, (|>))
import K2C.Window (nextIndex)

-- | Register stages of 'layerNorm' (see the module header).
type LayerNormDepth = 14

-- | The stage: @bd@ the width of @S@ and @d_i@, @n@ the table's index bits
-- (type applications); @e@, the table, gamma and beta from @Weights.hs@;
-- @finish@ the requantization and the activation.
layerNorm
  :: forall bd n dom c hm m ti r ia fa iw fw ib fb b
   . ( HiddenClockResetEnable dom, KnownNat c, KnownNat bd, KnownNat n, 2 <= n, n <= 2 * hm
     , KnownNat hm, 1 <= hm, KnownNat m, 1 <= m, KnownNat ti, KnownNat r
     , KnownNat ia, KnownNat fa, KnownNat iw, KnownNat fw, KnownNat ib, KnownNat fb, NFDataX b )
  => Unsigned (2 * hm) -> TableRom m (SFixed ti r)
  -> Vec c (SFixed iw fw) -> Vec c (SFixed ib fb)
  -> (SFixed (1 + Max (iw + 1 + ti) ib) (Max (fw + hm + r) fb) -> b)
  -> Stream dom (Vec c (SFixed ia fa)) (Vec c b)
layerNorm e table gammas betas finish = pipeS (SNat @LayerNormDepth) stages
  where
    stages input = done
      where
        beat   = stageReg input
        sums   = stageReg (fmap (\xs -> let ws = map widen xs in (ws, fold (+) (0 :> ws))) <$> beat)
        devs   = stageReg (fmap (\(ws, s) -> map (\w -> timesConst @c w - s) ws) <$> sums)
        -- the products in two stages: 18x18 partial products (each a MULT18X18D with its output
        -- register), then their sum
        parts  = stageReg (fmap (\ds -> (map (\d -> partials d d) ds, zipWith (partials . unSF) gammas ds)) <$> devs)
        squares = stageReg (fmap (\(qs, gs) -> (map (square . joinPartials) qs, map scaled gs)) <$> parts)
        us     = stageReg (fmap (\(qs, gs) -> (fold (+) (e :> qs), gs)) <$> squares)
        pairs  = stageReg (fmap (\(u, gs) -> (u, leadingPairs u, gs)) <$> us)
        index  = stageReg (fmap (\(u, k, gs) -> (tableIndex @n u k, k, gs)) <$> pairs)
        -- the table's read and its register, which synthesis absorbs into the block RAM
        entry  = stageReg (fmap (\(j, _, _) -> readTable j) <$> index)
        normed = stageReg (fmap (\(_, k, gs) -> map (normalize k) gs) <$> index)
        -- the block RAM's output register (nothing but this register reads its data)
        fetched = stageReg ((\g t -> (,) <$> g <*> t) <$> normed <*> entry)
        -- one more, in the fabric: the entry goes from the block RAM's row to every channel's
        -- multipliers (without it, on ECP5 the multipliers took this register as their input
        -- register, and the block RAM's unregistered read and that route made 10.4 ns)
        moved  = stageReg fetched
        prodParts = stageReg (fmap (\(gs, t) -> map (\g -> partials (unSF g) (unSF t)) gs) <$> moved)
        prods  = stageReg (fmap (map product') <$> prodParts)
        done   = stageReg (fmap (map finish . zipWith (flip addExact) betas) <$> prods)

    TableRom readTable = table

    widen :: SFixed ia fa -> Signed bd
    widen = resize . unSF

    square :: Signed (bd + bd) -> Unsigned (2 * hm)
    square dd = unpack (resize (pack dd))

    scaled :: Vec (Limbs (iw + fw)) (Vec (Limbs bd) (Signed 36)) -> SFixed (iw + bd) fw
    scaled = sf (SNat @fw) . joinPartials @(iw + fw) @bd

    product' :: Vec (Limbs (iw + 1 + fw + hm)) (Vec (Limbs (ti + r)) (Signed 36)) -> SFixed (iw + 1 + ti) (fw + hm + r)
    product' = sf (SNat @(fw + hm + r)) . joinPartials @(iw + 1 + fw + hm) @(ti + r)

    normalize :: Index hm -> SFixed (iw + bd) fw -> SFixed (iw + 1) (fw + hm)
    normalize k gd = sf (SNat @(fw + hm)) (shiftL (resize (unSF gd)) (fromEnum k))

-- | Register stages of 'layerNormLanes''s pipeline (see the module header).
type LayerNormLanesDepth = 18

-- | 'layerNorm' on @l@ of the @k * l@ channels a cycle (see the module header):
-- the same arithmetic and the same integers.
layerNormLanes
  :: forall bd n k l dom hm m ti r ia fa iw fw ib fb b
   . ( HiddenClockResetEnable dom, KnownNat k, 1 <= k, KnownNat l, 1 <= l, KnownNat bd, KnownNat n
     , 2 <= n, n <= 2 * hm, KnownNat hm, 1 <= hm, KnownNat m, 1 <= m, KnownNat ti, KnownNat r
     , KnownNat ia, KnownNat fa, KnownNat iw, KnownNat fw, KnownNat ib, KnownNat fb, NFDataX b )
  => SNat k -> Unsigned (2 * hm) -> TableRom m (SFixed ti r)
  -> Vec (k * l) (SFixed iw fw) -> Vec (k * l) (SFixed ib fb)
  -> (SFixed (1 + Max (iw + 1 + ti) ib) (Max (fw + hm + r) fb) -> b)
  -> Stream dom (Vec (k * l) (SFixed ia fa)) (Vec (k * l) b)
layerNormLanes SNat e table gammas betas finish =
  mapS (\xs -> xs ++ xs)
    |> scatter (SNat @(2 * k))
    |> pipeS (SNat @LayerNormLanesDepth) stages
    |> collect (SNat @(2 * k))
    |> mapS (drop (SNat @(k * l)))
  where
    gammaChunks = unconcatI @k @l gammas
    betaChunks = unconcatI @k @l betas
    stages input = done
      where
        -- which chunk a beat is: beats 0 .. k-1 of every 2 k the first pass, the rest the second
        count  = register (0 :: Index (2 * k)) (mux (isJust <$> input) (nextIndex <$> count) count)
        tagged = stageReg ((\i -> fmap (\xs -> (tag i, xs))) <$> count <*> input)
        -- the first pass: the chunk's sum, and its squares as 18x18 partial products
        parts  = stageReg (on (\_ xs -> (xs, fold (+) (0 :> map widen xs), map (\x -> partials (unSF x) (unSF x)) xs)) <$> tagged)
        chunkQ = stageReg (on (\_ (xs, s, qs) -> (xs, s, fold (+) (0 :> map square' qs))) <$> parts)
        -- the running sums of the first pass: its last beat leaves with S and sum x^2
        summed = stageReg ((\acc -> on (\t (xs, s, q) -> (xs, add t acc (s, q)))) <$> latest <*> chunkQ)
        -- the sums so far: those of the first-pass beat leaving this stage, else the last kept
        latest = mux (firstPass <$> summed) (snd . snd . fromJustX <$> summed) running
        running :: Signal dom (Signed bd, Signed (2 * hm))
        running = register (0, 0) latest
        add t (sa, qa) (s, q) = if chunkOf t == 0 then (s, q) else (sa + s, qa + q)
        heldS  = held (fst . snd . snd) summed
        -- the second pass: d_i = c x_i - S, and gamma_i registered beside it; the first pass's
        -- last beat: S and sum x^2 registered once more, so that S^2's multipliers take their
        -- operands from a plain register (the running sums' register is fed by their adders,
        -- which would then end in the multipliers' inputs)
        devs   = stageReg ((\sb -> on (\t (xs, (s, q)) ->
                   (map (\x -> timesConst @(k * l) (widen x) - sb) xs, gammaChunks !! chunkOf t, q, s))) <$> heldS <*> summed)
        gdParts = stageReg (on (\_ (ds, gs, q, s) -> (zipWith (partials . unSF) gs ds, q, partials s s)) <$> devs)
        -- S^2's partial products once more, in the fabric, before their sum and the subtraction
        -- (read straight from the multipliers' output registers: 4.1 ns of route, then both
        -- carry chains, 11.0 ns on ECP5, the transformer example)
        ssNear = stageReg gdParts
        vs     = stageReg (on (\_ (gs, q, ss) -> (gs, timesConst @(k * l) q - wrap (joinPartials ss))) <$> ssNear)
        -- u = c (c sum x^2 - S^2) + e = sum d_i^2 + e on 2 hm bits: it fits them, so the
        -- wrapping sums are exact
        us     = stageReg (on (\_ (gs, v) -> (map scaled gs, unpack (pack (timesConst @(k * l) v)) + e)) <$> vs)
        pairs  = stageReg (on (\_ (gs, u) -> (gs, u, leadingPairs u)) <$> us)
        index  = stageReg (on (\_ (gs, u, p) -> (gs, tableIndex @n u p, p)) <$> pairs)
        heldK  = held (\(_, (_, _, p)) -> p) index
        -- the first pass's table read and its register (the block RAM's synchronous read),
        -- beside the second pass's gamma_i d_i 2^(hm - h)
        entry  = stageReg (fmap (\(_, (_, j, _)) -> readTable j) <$> index)
        normed = stageReg ((\p -> on (\_ (gs, _, _) -> map (normalize p) gs)) <$> heldK <*> index)
        -- the block RAM's output register; the entry kept as it leaves, and a second-pass
        -- chunk's copy of it registered beside its values, in the fabric (as in 'layerNorm'),
        -- so that both operands of every multiplier come from one plain register (an entry
        -- read straight from the kept one, a register with an enable, leaves the block's
        -- input register unused on that side)
        fetched = stageReg ((\g x -> (\(t, gs) x' -> (t, (gs, x'))) <$> g <*> x) <$> normed <*> entry)
        heldT  = held (snd . snd) fetched
        moved  = stageReg ((\x -> on (\_ (gs, _) -> (gs, x))) <$> heldT <*> fetched)
        prodParts = stageReg (on (\_ (gs, x) -> map (\g -> partials (unSF g) (unSF x)) gs) <$> moved)
        -- the partial products once more, in the fabric: the multipliers sit in their rows, often
        -- far from the adders that sum them (the transformer example on ECP5, placed: a product
        -- register, then the whole width of the chip to the sum's carry chain)
        prodNear = stageReg prodParts
        prods  = stageReg (on (\t ps -> (betaChunks !! chunkOf t, map product' ps)) <$> prodNear)
        done   = stageReg (fmap (\(_, (bs, ps)) -> map finish (zipWith (flip addExact) bs ps)) <$> prods)

    -- (first pass, its last beat, the chunk)
    tag :: Index (2 * k) -> (Bool, Bool, Index k)
    tag i
      | i < natToNum @k = (True, i == natToNum @(k - 1), resize i)
      | otherwise = (False, False, resize (i - natToNum @k))

    chunkOf (_, _, i) = i

    square' :: Vec (Limbs (ia + fa)) (Vec (Limbs (ia + fa)) (Signed 36)) -> Signed (2 * hm)
    square' = wrap . joinPartials @(ia + fa) @(ia + fa)

    -- a stage's function of the tag and the values, the tag carried along
    on :: (t -> a -> c) -> Maybe (t, a) -> Maybe (t, c)
    on f = fmap (\(t, a) -> (t, f t a))

    firstPass :: Maybe ((Bool, Bool, Index k), a) -> Bool
    firstPass = maybe False (\((p, _, _), _) -> p)

    -- a value of the first pass's last beat, kept for the second pass
    held :: NFDataX v => Num v => (((Bool, Bool, Index k), a) -> v) -> Signal dom (Maybe ((Bool, Bool, Index k), a)) -> Signal dom v
    held f stage = value
      where
        value = register 0 (mux (lastBeat <$> stage) (f . fromJustX <$> stage) value)
        lastBeat = maybe False (\((_, lst, _), _) -> lst)

    TableRom readTable = table

    widen :: SFixed ia fa -> Signed bd
    widen = resize . unSF

    scaled :: Vec (Limbs (iw + fw)) (Vec (Limbs bd) (Signed 36)) -> SFixed (iw + bd) fw
    scaled = sf (SNat @fw) . joinPartials @(iw + fw) @bd

    product' :: Vec (Limbs (iw + 1 + fw + hm)) (Vec (Limbs (ti + r)) (Signed 36)) -> SFixed (iw + 1 + ti) (fw + hm + r)
    product' = sf (SNat @(fw + hm + r)) . joinPartials @(iw + 1 + fw + hm) @(ti + r)

    normalize :: Index hm -> SFixed (iw + bd) fw -> SFixed (iw + 1) (fw + hm)
    normalize k' gd = sf (SNat @(fw + hm)) (shiftL (resize (unSF gd)) (fromEnum k'))

-- | The low @v@ bits of @x@ as a signed number (arithmetic modulo @2^v@).
wrap :: forall w v . (KnownNat w, KnownNat v) => Signed w -> Signed v
wrap x = truncateB (resize x :: Signed (v + w))

-- | @c x@ for the constant @c@: the sum of @x@ shifted by each set bit of @c@
-- (synthesis folds the zero terms away), so that no multiplier is spent on it.
timesConst :: forall c w . (KnownNat c, KnownNat w) => Signed w -> Signed w
timesConst x = fold (+) (0 :> imap term (reverse (bv2v (pack constant))))
  where
    constant = natToNum @c :: Signed w
    term i b = if b == high then shiftL x (fromEnum i) else 0

-- | The leading zero bit pairs of @u@ (@hm - 1@ for @u = 0@, whose every
-- later use multiplies by a zero @d_i@).
leadingPairs :: forall hm . KnownNat hm => Unsigned (2 * hm) -> Index hm
leadingPairs u = fromMaybe maxBound (findIndex (/= 0) groups)
  where
    groups = unpack (pack u) :: Vec hm (BitVector 2)

-- | The table index of @u@ with @k@ leading pairs: the top @n@ bits of
-- @u 4^k@ (at least @2^(n-2)@ when @u /= 0@) less @2^(n-2)@; 0 for @u = 0@.
-- The table has @m = 3 * 2^(n-2)@ entries.
tableIndex
  :: forall n hm m . (KnownNat n, KnownNat hm, n <= 2 * hm, KnownNat m) => Unsigned (2 * hm) -> Index hm -> Index m
tableIndex u k = if top < quarter then 0 else fromIntegral (top - quarter)
  where
    top = resize (shiftR (shiftL u (2 * fromEnum k)) (natToNum @(2 * hm - n))) :: Unsigned n
    quarter = bit (natToNum @n - 2)

-- | Bits of a limb below the top one.
type Limb = 17

-- | Limbs of a @Signed w@ (@w >= 2@): @k - 1@ unsigned ones of 'Limb' bits and a signed top
-- one of 18 bits cover @17 k + 1@ bits.
type Limbs w = Div (w + 15) Limb

-- | @x@ as its limbs, lowest first, each an 18-bit signed value:
-- @x = sum_i limb_i 2^(17 i)@ (the top one signed, the others in @[0, 2^17)@).
limbs :: forall w . KnownNat w => Signed w -> Vec (Limbs w) (Signed 18)
limbs x = imap limb (repeat ())
  where
    wide = resize x :: Signed (Limb * Limbs w + 1)
    limb i ()
      | i == maxBound = resize (shiftR wide (natToNum @Limb * fromEnum i))
      | otherwise = unpack (zeroExtend (resize (pack (shiftR wide (natToNum @Limb * fromEnum i))) :: BitVector Limb))

-- | The partial products of @a * b@, limb by limb: each an 18x18 signed product, one
-- MULT18X18D on ECP5. Registered as they are, each block registers its own output; a
-- product wider than one block left to synthesis sums its blocks' unregistered outputs in
-- the same cycle (on ECP5 a block's output is valid 3.9 ns after the clock).
partials :: forall wa wb . (KnownNat wa, KnownNat wb) => Signed wa -> Signed wb -> Vec (Limbs wa) (Vec (Limbs wb) (Signed 36))
partials a b = map (\x -> map (mul x) (limbs b)) (limbs a)

-- | The sum of 'partials': @a * b@, exactly (the terms are summed in a width that holds every
-- partial sum, then the product, which fits @wa + wb@ bits, is taken).
joinPartials
  :: forall wa wb . (KnownNat wa, KnownNat wb) => Vec (Limbs wa) (Vec (Limbs wb) (Signed 36)) -> Signed (wa + wb)
joinPartials ps = resize (fold (+) (0 :> concat (imap (\i row -> imap (term (fromEnum i)) row) ps)))
  where
    term :: Int -> Index (Limbs wb) -> Signed 36 -> Signed (Limb * (Limbs wa + Limbs wb) + 8)
    term i j p = shiftL (resize p) (natToNum @Limb * (i + fromEnum j))
