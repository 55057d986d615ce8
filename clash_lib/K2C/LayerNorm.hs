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
  , timesConst
  , leadingPairs
  , tableIndex
  , Limbs
  , limbs
  , partials
  , joinPartials
  ) where

import Clash.Prelude
import Data.Maybe (fromMaybe)

import K2C.Lut (TableRom (..))
import K2C.Merge (addExact)
import K2C.Pipe (pipeS, stageReg)
import K2C.Stream (Stream)

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
